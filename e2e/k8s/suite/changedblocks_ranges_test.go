package suite

import (
	"bytes"
	"cmp"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// What scenario ChangedBlocks computes without a cluster: the writers'
// script, the lister's output as byte ranges, the comparison at ZFS's block
// granularity, and the certificates of the sidecar's Service.

// extent is a byte range of a volume: offset and length.
type extent struct{ offset, length int64 }

func (x extent) end() int64 { return x.offset + x.length }

func (x extent) String() string { return fmt.Sprintf("[%d,+%d)", x.offset, x.length) }

// writeExtents is a pod script that fills each extent of the raw block
// volume at /dev/xvda with random data (which no compression turns into a
// hole), durably, in 16 KiB writes: the extents must be multiples of it.
func writeExtents(extents []extent) string {
	const unit = 16 << 10
	var b strings.Builder
	b.WriteString("set -e; ")
	for _, x := range extents {
		fmt.Fprintf(&b, "dd if=/dev/urandom of=/dev/xvda bs=%d seek=%d count=%d conv=notrunc,fsync 2>/dev/null; ", unit, x.offset/unit, x.length/unit)
	}
	b.WriteString("echo written > /dev/termination-log")
	return b.String()
}

// merged sorts extents and joins those that overlap or touch.
func merged(extents []extent) []extent {
	sorted := slices.Clone(extents)
	slices.SortFunc(sorted, func(a, b extent) int { return cmp.Compare(a.offset, b.offset) })
	var out []extent
	for _, x := range sorted {
		if x.length <= 0 {
			continue
		}
		if n := len(out); n > 0 && x.offset <= out[n-1].end() {
			out[n-1].length = max(out[n-1].end(), x.end()) - out[n-1].offset
			continue
		}
		out = append(out, x)
	}
	return out
}

// listerRecord is one record of snapshot-metadata-lister -o json (its
// iterator.JSONEmitter: encoding/json of the gRPC messages, so a zero field
// is left out).
type listerRecord struct {
	Type          int   `json:"block_metadata_type"`
	Capacity      int64 `json:"volume_capacity_bytes"`
	BlockMetadata []struct {
		Offset int64 `json:"byte_offset"`
		Size   int64 `json:"size_bytes"`
	} `json:"block_metadata"`
}

// variableLength is BlockMetadataType VARIABLE_LENGTH in the sidecar's API
// (and CSI's): each range has its own size, as this driver answers.
const variableLength = 2

// parseListerJSON reads the ranges and the volume's capacity from the log of
// snapshot-metadata-lister -o json: one line that is a JSON list of records
// (the log may hold other lines, e.g. gRPC's warnings).
func parseListerJSON(log string) ([]extent, int64, error) {
	var line string
	for _, l := range strings.Split(log, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "[") {
			line = l
		}
	}
	if line == "" {
		return nil, 0, fmt.Errorf("no JSON list in the lister's output %q", log)
	}
	var records []listerRecord
	decoder := json.NewDecoder(strings.NewReader(line))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&records); err != nil {
		return nil, 0, fmt.Errorf("the lister's output %q: %w", line, err)
	}
	var extents []extent
	var capacity int64
	for i, r := range records {
		if r.Type != variableLength {
			return nil, 0, fmt.Errorf("record %d: block_metadata_type %d, want VARIABLE_LENGTH (%d)", i+1, r.Type, variableLength)
		}
		if i > 0 && r.Capacity != capacity {
			return nil, 0, fmt.Errorf("record %d: volume_capacity_bytes %d, the first said %d", i+1, r.Capacity, capacity)
		}
		capacity = r.Capacity
		for _, m := range r.BlockMetadata {
			if m.Offset < 0 || m.Size <= 0 || m.Offset+m.Size > r.Capacity {
				return nil, 0, fmt.Errorf("record %d: range [%d,+%d) outside the volume of %d bytes", i+1, m.Offset, m.Size, r.Capacity)
			}
			extents = append(extents, extent{m.Offset, m.Size})
		}
	}
	return merged(extents), capacity, nil
}

// coversOnly checks that got covers every byte of want and holds nothing
// beyond want's extents rounded out to whole blocks (ZFS tracks changes by
// block: a partly written block changed whole).
func coversOnly(got, want []extent, block int64) error {
	got, want = merged(got), merged(want)
	var rounded []extent
	for _, x := range want {
		start := x.offset / block * block
		end := (x.end() + block - 1) / block * block
		rounded = append(rounded, extent{start, end - start})
	}
	rounded = merged(rounded)
	var problems []string
	for _, x := range want {
		if !within(x, got) {
			problems = append(problems, fmt.Sprintf("%v is not reported", x))
		}
	}
	for _, x := range got {
		if !within(x, rounded) {
			problems = append(problems, fmt.Sprintf("%v is reported, outside %v", x, rounded))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("got %v, want %v: %s", got, want, strings.Join(problems, "; "))
	}
	return nil
}

// within reports whether x lies inside one extent of the merged list.
func within(x extent, extents []extent) bool {
	for _, y := range extents {
		if x.offset >= y.offset && x.end() <= y.end() {
			return true
		}
	}
	return false
}

// writeCertificates writes what docs/changed-block-tracking.md has the user
// bring: ca.pem, a CA's certificate, and server.pem and server.key, a
// certificate it signed for host (the SnapshotMetadataService's address,
// the Service's name in its namespace) and the Service's other names.
func writeCertificates(dir, host string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "zfs-csi e2e snapshot metadata CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	server := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host},
		DNSNames:  []string{host, host + ".svc", host + ".svc.cluster.local"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	serverDER, err := x509.CreateCertificate(rand.Reader, server, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	for name, block := range map[string]*pem.Block{
		"ca.pem":     {Type: "CERTIFICATE", Bytes: caDER},
		"server.pem": {Type: "CERTIFICATE", Bytes: serverDER},
		"server.key": {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// runIn runs a bash script in dir with env added and returns its combined
// output; the error holds it too.
func runIn(dir, script string, env []string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", script, err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}
