package suite

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Across nodes when something goes wrong (through
// Nomad): the sending daemon killed in the middle of a pull, an encrypted
// volume's restore on the other node, and a peer whose certificate comes
// from another CA.

// peerPort is where node-b's daemon serves its peers (suite.sh PEER_PORT).
const peerPort = "7443"

// encryptionPassphrase is the key of the encrypted scenario's volumes.
const encryptionPassphrase = "a passphrase for the across-nodes scenario"

// secretsBlock is the volume specification's secrets, as docs/encryption.md
// tells a Nomad user to write them.
var secretsBlock = fmt.Sprintf("secrets {\n  encryptionPassphrase = %q\n}\n\n", encryptionPassphrase)

// killedMiB is the data of the killed pull: at the ~5 MiB/s the pull makes
// between two TCG guests it runs for half a minute, long enough for node-b's
// log (published every third second) to show it started.
const killedMiB = 160

// 4d. node-a's daemon (the sender) is killed with SIGKILL while node-b pulls
// its snapshot; systemd starts it again and node-b's pull resumes from its
// receive token. The restore comes out whole: the data's checksum agrees on
// node-b, and node-b logged more than one stream for it.
func testRestoreAcrossNodesSenderKilled(t *testing.T, e *env) {
	id := "killed-src"
	spec := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.node + `"`, `"10GiB"`: `"512MiB"`})
	must(t, "nomad", "volume", "create", spec)
	_, ds := dataset(t, e.volume(t, id))
	e.runJob(t, e.workload(t, id+"-writer", id, false, fmt.Sprintf(
		"set -e; dd if=/dev/urandom of=/data/blob bs=1M count=%d 2>/dev/null; cd /data && sha256sum blob > sum && sync", killedMiB)), id+"-writer")
	snapID := e.snapshot(t, id, "killed")
	restarts := e.daemonRestarts(t)

	restored := "killed-restored"
	restore := e.spec(t, "volume-from-snapshot.hcl", map[string]string{`"pg-data-restore"`: `"` + restored + `"`,
		`"@NODE@:tank/csi/pg-data@nightly"`: `"` + snapID + `"`, `"@NODE@"`: `"` + e.peer + `"`, `"10GiB"`: `"512MiB"`})
	pullsBefore := e.peerPullStarts(t)
	created := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(15 * time.Minute)
		for {
			_, err := run("nomad", "volume", "create", restore)
			if err == nil || time.Now().After(deadline) {
				created <- err
				return
			}
			time.Sleep(time.Second)
		}
	}()
	start := time.Now()
	var killedAfter time.Duration
	for killedAfter == 0 {
		select {
		case err := <-created:
			t.Fatalf("the restore ended (%v) before node-b's log showed its pull: nothing was killed", err)
		case <-time.After(time.Second):
		}
		if e.peerPullStarts(t) > pullsBefore {
			must(t, "systemctl", "kill", "--signal=SIGKILL", "zfs-csi.service")
			killedAfter = time.Since(start)
		}
	}
	if err := <-created; err != nil {
		t.Fatalf("the restore was not created after the sender was killed: %v", err)
	}
	if now := e.daemonRestarts(t); now <= restarts {
		t.Errorf("zfs-csi.service on %s restarted %d times before the kill and %d after: was it killed?", e.node, restarts, now)
	}
	e.pluginHealthy(t) // for the reader job and the scenarios after this one
	_, restoredDS := dataset(t, e.volume(t, restored))
	pull := e.peerPull(t, path.Base(restoredDS))
	t.Logf("the sender was killed %s after the restore began; the restore on %s was created after %s; node-b pulled %d MiB in %d streams, %d resumed",
		killedAfter.Round(time.Second), e.peer, time.Since(start).Round(time.Second), pull.bytes>>20, pull.streams, pull.resumed)
	if pull.streams < 2 || pull.resumed < 1 {
		t.Errorf("node-b logged %d stream(s), %d resumed, for the pull: the kill did not cut one, or the pull began again from nothing",
			pull.streams, pull.resumed)
	}
	e.checkRestoreAndRemove(t, restored, restoredDS, snapID, id, ds)
}

// 4e. An encrypted volume's snapshot restored on node-b: it travels raw (the
// restore is encrypted on node-b, with the source's key), and a job there
// reads the data once node-b's daemon loaded the key from the restore's
// secrets.
func testRestoreAcrossNodesEncrypted(t *testing.T, e *env) {
	id := "enc-src"
	withKey := map[string]string{"parameters {": secretsBlock + "parameters {\n  \"encryption\" = \"aes-256-gcm\""}
	spec := e.spec(t, "volume-dataset.hcl", merge(withKey, map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.node + `"`, `"10GiB"`: `"128MiB"`}))
	must(t, "nomad", "volume", "create", spec)
	_, ds := dataset(t, e.volume(t, id))
	if got := strings.TrimSpace(must(t, "zfs", "get", "-H", "-o", "value", "encryption", ds)); got != "aes-256-gcm" {
		t.Fatalf("the source %s has encryption %q", ds, got)
	}
	e.runJob(t, e.workload(t, id+"-writer", id, false, blobScript), id+"-writer")
	snapID := e.snapshot(t, id, "enc")

	restored := "enc-restored"
	restore := e.spec(t, "volume-from-snapshot.hcl", map[string]string{`"pg-data-restore"`: `"` + restored + `"`,
		`"@NODE@:tank/csi/pg-data@nightly"`: `"` + snapID + `"`, `"@NODE@"`: `"` + e.peer + `"`, `"10GiB"`: `"128MiB"`,
		"topology_request {": secretsBlock + "topology_request {"})
	eventually(t, 10*time.Minute, "the encrypted restore on "+e.peer+" to be created", func() (bool, error) {
		_, err := run("nomad", "volume", "create", restore)
		return err == nil, err
	})
	node, restoredDS := dataset(t, e.volume(t, restored))
	if node != e.peer {
		t.Fatalf("the restore was made on %s, want %s", node, e.peer)
	}
	e.peerProperty(t, restoredDS, "encryption", "aes-256-gcm")
	e.checkRestoreAndRemove(t, restored, restoredDS, snapID, id, ds)
}

// 4f. node-b's channel refuses a client whose certificate names node-a but
// comes from another CA, and one without a certificate; node-a's own
// certificate is accepted (the control: the refusals are the CA's doing).
func testPeerFromAnotherCA(t *testing.T, e *env) {
	address := net.JoinHostPort(e.peerAddress(t), peerPort)
	genuine := bareTLSConfig(t, e.node)
	// The channel is gRPC, whose server closes a connection that does not
	// ask for HTTP/2 by ALPN (first run: node-a's own certificate got EOF).
	genuine.NextProtos = []string{"h2"}
	// Go's client sends only a certificate from a CA the server names in
	// its request (first run: the forged one was never sent, "certificate
	// required"): the forged certificate is handed over whatever is asked.
	forgedCertificate := certificateFromAnotherCA(t, e.node)
	forged := genuine.Clone()
	forged.Certificates = nil
	forged.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &forgedCertificate, nil }
	none := genuine.Clone()
	none.Certificates = nil
	for _, c := range []struct {
		name    string
		config  *tls.Config
		refused bool
	}{
		{"node-a's own certificate", genuine, false},
		{"a certificate naming node-a from another CA", forged, true},
		{"no certificate", none, true},
	} {
		err := tlsAnswer(address, c.config)
		switch {
		case c.refused && err == nil:
			t.Errorf("%s: node-b's channel accepted it", c.name)
		case !c.refused && err != nil:
			t.Errorf("%s: node-b's channel refused it: %v", c.name, err)
		case c.config == forged && strings.Contains(err.Error(), "certificate required"):
			t.Errorf("%s: refused as if no certificate was sent (%v): the forged one was not presented", c.name, err)
		default:
			t.Logf("%s: %v", c.name, errOr(err, "accepted"))
		}
	}
}

// tlsAnswer connects and shakes hands. In TLS 1.3 the server judges the
// client's certificate after the client's side of the handshake is done, so
// its verdict is the first thing read: an alert refuses, silence (the gRPC
// server waiting for the client's preface) accepts.
func tlsAnswer(address string, config *tls.Config) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", address, config)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	var timeout net.Error
	if errors.As(err, &timeout) && timeout.Timeout() {
		return nil
	}
	if err == nil {
		return nil // the server spoke first (an HTTP/2 settings frame): accepted
	}
	return err
}

// certificateFromAnotherCA makes a CA of its own and a client certificate
// from it that names node the way the shipped ones do.
func certificateFromAnotherCA(t *testing.T, node string) tls.Certificate {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTemplate := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	uri, err := url.Parse("urn:zfs-csi:node:" + node)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: node}, URIs: []*url.URL{uri},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func errOr(err error, otherwise string) string {
	if err == nil {
		return otherwise
	}
	return "refused: " + err.Error()
}

func merge(maps ...map[string]string) map[string]string {
	all := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			all[k] = v
		}
	}
	return all
}

// snapshot takes a snapshot of volume through Nomad and returns its ID.
func (e *env) snapshot(t *testing.T, volume, name string) string {
	t.Helper()
	out := strings.Split(strings.TrimSpace(must(t, "nomad", "volume", "snapshot", "create", volume, name)), "\n")
	if len(out) != 2 {
		t.Fatalf("snapshot create printed %q", out)
	}
	return strings.Fields(out[1])[0]
}

// daemonRestarts is how often systemd restarted this host's zfs-csi.service.
func (e *env) daemonRestarts(t *testing.T) int {
	t.Helper()
	var n int
	out := strings.TrimSpace(must(t, "systemctl", "show", "-p", "NRestarts", "--value", "zfs-csi.service"))
	if _, err := fmt.Sscan(out, &n); err != nil {
		t.Fatalf("NRestarts %q: %v", out, err)
	}
	return n
}

// peerPullStarts counts the pulls node-b's daemon logged as started.
func (e *env) peerPullStarts(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.peerResults, "pulls.txt"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(data), `"message":"pulling"`)
}
