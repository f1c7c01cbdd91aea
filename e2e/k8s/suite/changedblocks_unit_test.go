package suite

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Without a cluster (make test): what scenario ChangedBlocks computes.

// testdata/lister-delta.json is what upstream's snapshot-metadata-lister
// v0.2.0 prints with -o json (its iterator.JSONEmitter, fed two records of
// VARIABLE_LENGTH ranges: the first starting at offset 0, which
// encoding/json leaves out of a gRPC message).
func TestTheListersJSONReadsAsMergedRanges(t *testing.T) {
	sample, err := os.ReadFile("testdata/lister-delta.json")
	if err != nil {
		t.Fatal(err)
	}
	got, capacity, err := parseListerJSON("WARNING: a line of gRPC's on stderr\n" + string(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := []extent{{0, 1 << 20}, {32 << 20, 1<<20 + 16<<10}}
	if !slices.Equal(got, want) || capacity != 1<<30 {
		t.Errorf("got %v of %d bytes, want %v of 1 GiB", got, capacity, want)
	}
	if got, _, err := parseListerJSON("[]"); err != nil || len(got) != 0 {
		t.Errorf("an empty list: %v, %v; want no ranges", got, err)
	}
	for name, log := range map[string]string{
		"no JSON":                  "Error: rpc error: code = Unavailable",
		"fixed-length ranges":      `[{"block_metadata_type":1,"volume_capacity_bytes":1024,"block_metadata":[{"size_bytes":512}]}]`,
		"a range past the end":     `[{"block_metadata_type":2,"volume_capacity_bytes":1024,"block_metadata":[{"byte_offset":1000,"size_bytes":512}]}]`,
		"an empty range":           `[{"block_metadata_type":2,"volume_capacity_bytes":1024,"block_metadata":[{"byte_offset":0}]}]`,
		"capacity changes":         `[{"block_metadata_type":2,"volume_capacity_bytes":1024},{"block_metadata_type":2,"volume_capacity_bytes":2048}]`,
		"a field it does not know": `[{"block_metadata_type":2,"volume_capacity_bytes":1024,"next":1}]`,
		"cut short":                `[{"block_metadata_type":2,"volume_capacity_bytes":1024`,
	} {
		if got, _, err := parseListerJSON(log); err == nil {
			t.Errorf("%s: %q read as %v, want an error", name, log, got)
		}
	}
}

func TestRangesCoverTheWritesAndOnlyTheirBlocks(t *testing.T) {
	const block = 16 << 10
	want := []extent{{32 << 10, 32 << 10}, {100 << 10, 4 << 10}} // the second partly fills block [96K,112K)
	for _, test := range []struct {
		name string
		got  []extent
		ok   bool
	}{
		{"exactly", []extent{{32 << 10, 32 << 10}, {100 << 10, 4 << 10}}, true},
		{"in pieces, out of order", []extent{{96 << 10, 16 << 10}, {48 << 10, 16 << 10}, {32 << 10, 16 << 10}}, true},
		{"the partly written block whole", []extent{{32 << 10, 32 << 10}, {96 << 10, 16 << 10}}, true},
		{"a block missing", []extent{{32 << 10, 16 << 10}, {96 << 10, 16 << 10}}, false},
		{"nothing", nil, false},
		{"an untouched block too", []extent{{32 << 10, 32 << 10}, {96 << 10, 16 << 10}, {0, 16 << 10}}, false},
		{"a block past the partly written one", []extent{{32 << 10, 32 << 10}, {96 << 10, 32 << 10}}, false},
	} {
		if err := coversOnly(test.got, want, block); (err == nil) != test.ok {
			t.Errorf("%s: %v: error %v, want ok %v", test.name, test.got, err, test.ok)
		}
	}
}

// The writers' script, run by bash with GNU dd on a file in place of the
// volume: random data in exactly the extents, zeros everywhere else.
func TestTheWritersFillExactlyTheirExtents(t *testing.T) {
	dir := t.TempDir()
	volume, message := filepath.Join(dir, "volume"), filepath.Join(dir, "termination-log")
	if err := os.WriteFile(volume, make([]byte, 256<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	extents := []extent{{160 << 10, 16 << 10}, {0, 16 << 10}, {48 << 10, 32 << 10}} // out of order: no truncation
	script := strings.NewReplacer("/dev/xvda", volume, "/dev/termination-log", message).Replace(writeExtents(extents))
	if out, err := runIn(dir, script, nil); err != nil {
		t.Fatal(err, out)
	}
	data, err := os.ReadFile(volume)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != 256<<10 {
		t.Fatalf("the volume is %d bytes after the writes, want 256 KiB", len(data))
	}
	zero := make([]byte, 16<<10)
	for offset := int64(0); offset < int64(len(data)); offset += 16 << 10 {
		written := within(extent{offset, 16 << 10}, merged(extents))
		if isZero := bytes.Equal(data[offset:offset+16<<10], zero); isZero == written {
			t.Errorf("block at %d KiB: written %v, all zero %v", offset>>10, written, isZero)
		}
	}
	for _, writes := range [][]extent{firstWrites, secondWrites} {
		for _, x := range writes {
			if x.offset%(16<<10) != 0 || x.length%(16<<10) != 0 || x.end() > 1<<30 {
				t.Errorf("the scenario's extent %v is not whole 16 KiB blocks of a 1 GiB volume", x)
			}
		}
	}
}

// The certificates serve TLS for the address of the SnapshotMetadataService
// to a client that trusts only ca.pem, as the lister's gRPC client does
// (the address's host is the name it checks).
func TestTheCertificatesServeTheServicesName(t *testing.T) {
	dir := t.TempDir()
	if err := writeCertificates(dir, snapshotMetadataHost); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	listener, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			_ = conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	for name, ok := range map[string]bool{snapshotMetadataHost: true, snapshotMetadataHost + ".svc": true, "zfs-csi-snapshot-metadata.default": false} {
		conn, err := tls.Dial("tcp", listener.Addr().String(), &tls.Config{RootCAs: roots, ServerName: name})
		if err == nil {
			conn.Close()
		}
		if (err == nil) != ok {
			t.Errorf("a TLS client asking for %s: %v, want ok %v", name, err, ok)
		}
	}
}

// The commands scenario ChangedBlocks reads from the installed
// docs/changed-block-tracking.md, run as written against the repository's
// examples with a kubectl that records what it is given: the TLS Secret
// from server.pem and server.key, the sidecar's objects, the
// SnapshotMetadataService with ca.pem as its caCert, and a client's
// ServiceAccount, its binding to the client role and the Role of its own
// token, named as the scenario's clean-up deletes them.
func TestTheDocsInstallChangedBlockTracking(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/changed-block-tracking.md")
	if err != nil {
		t.Fatal(err)
	}
	install, client, err := changedBlocksCommands(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	examples, err := filepath.Abs("../../../packaging/kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	dir, bin := t.TempDir(), t.TempDir()
	if err := writeCertificates(dir, snapshotMetadataHost); err != nil {
		t.Fatal(err)
	}
	applied, calls := filepath.Join(bin, "applied.yaml"), filepath.Join(bin, "calls")
	fake := `#!/bin/bash
set -euo pipefail
echo "$*" >>"$KUBECTL_CALLS"
[[ $1 == apply ]] || exit 0
shift
while (($#)); do
	[[ $1 == -f ]] || { echo "unexpected: $1" >&2; exit 1; }
	{ cat -- "$2"; echo; echo ---; } >>"$KUBECTL_APPLIED"
	shift 2
done
`
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"KUBECTL_APPLIED=" + applied, "KUBECTL_CALLS=" + calls, "NAMESPACE=backup", "SERVICE_ACCOUNT=app"}
	for _, block := range []string{install, client} {
		local := strings.ReplaceAll(block, "/usr/share/doc/zfs-csi/examples/kubernetes", examples)
		if out, err := runDocsBlock(local, dir, bin, env); err != nil {
			t.Fatal(err, out)
		}
	}
	var kinds []string
	for _, object := range appliedObjects(t, applied) {
		kinds = append(kinds, object.GetKind()+" "+object.GetName())
		if object.GetKind() == "SnapshotMetadataService" {
			ca, _, _ := unstructured.NestedString(object.Object, "spec", "caCert")
			want, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
			if err != nil {
				t.Fatal(err)
			}
			if got, err := base64.StdEncoding.DecodeString(ca); err != nil || !bytes.Equal(got, want) {
				t.Errorf("the SnapshotMetadataService's caCert %q is not ca.pem in base64 (%v)", ca, err)
			}
		}
	}
	slices.Sort(kinds)
	wantKinds := []string{
		"ClusterRole zfs-csi-snapshot-metadata", "ClusterRole zfs-csi-snapshot-metadata-client",
		"ClusterRoleBinding zfs-csi-snapshot-metadata", "DaemonSet zfs-csi-snapshot-metadata",
		"Service zfs-csi-snapshot-metadata", "ServiceAccount zfs-csi-snapshot-metadata",
		"SnapshotMetadataService zfs.csi.dev",
	}
	if !slices.Equal(kinds, wantKinds) {
		t.Errorf("the docs apply\n%q\nwant\n%q", kinds, wantKinds)
	}
	recorded, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"-n " + driverNS + " create secret tls " + snapshotMetadataTLS + " --cert=server.pem --key=server.key",
		"-n backup create serviceaccount app",
		"create clusterrolebinding zfs-csi-snapshot-metadata-backup-app --clusterrole=" + changedBlocksClientRole + " --serviceaccount=backup:app",
		"-n backup create role app-token --verb=create --resource=serviceaccounts/token --resource-name=app",
		"-n backup create rolebinding app-token --role=app-token --serviceaccount=backup:app",
	} {
		if !strings.Contains(string(recorded), want+"\n") {
			t.Errorf("the docs do not run kubectl %s; they ran:\n%s", want, recorded)
		}
	}
}
