package suite

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
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
// log (published every third second) to show it started and for 16 MiB of it
// to land before the kill.
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
			t.Fatalf("the restore ended (%v) before node-b's log showed its pull and 16 MiB of it had landed: nothing was killed", err)
		case <-time.After(time.Second):
		}
		// Killed before node-b holds any of the stream, the sender
		// leaves nothing to resume and node-b rightly starts over: the
		// kill waits for 16 MiB to have landed, not only for the pull
		// to have begun (the e2e test's kill 2 s after the start once
		// fell before any, on a loaded host).
		if e.peerPullStarts(t) > pullsBefore && e.peerIncomingBytes(t) >= 16<<20 {
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
	e2eutil.Eventually(t, 10*time.Minute, "the encrypted restore on "+e.peer+" to be created", func() (bool, error) {
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
	ca, caKey, _ := anotherCA(t)
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

// anotherCA makes a CA of its own: its certificate, key and PEM.
func anotherCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
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
	return ca, caKey, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
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

// peerIncomingBytes is the most any dataset being received on the peer
// (under an _incoming parent) uses, from its published `zfs get`.
func (e *env) peerIncomingBytes(t *testing.T) int64 {
	t.Helper()
	props, err := e.peerProps()
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var most int64
	for _, p := range props {
		if strings.Contains(p[0], "/_incoming/") && p[1] == "used" {
			if used, err := strconv.ParseInt(p[2], 10, 64); err == nil && used > most {
				most = used
			}
		}
	}
	return most
}

// staleRoundNonce names the round MoveStaleRound plants: any 16 hex digits.
const staleRoundNonce = "5ca1ab1e0ddba115"

// 4g. A move of node-a's volume to node-b, run on node-b as
// docs/across-nodes.md runs it, with a stale round waiting on the source:
// a snapshot marked for the same pull (the same pull-for as the real round)
// as an earlier try of this move would have left. After the first round,
// the stale one planted and more data written, the final round keeps every
// write: node-b's volume holds every file with the sha256 it had on
// node-a, the last writes included, and no round or received dataset
// remains on either node; the source is gone.
//
// long: one scenario on the cluster whose steps build on the volumes before them
func testMoveStaleRound(t *testing.T, e *env) {
	id := "stale-src"
	spec := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.node + `"`, `"10GiB"`: `"128MiB"`})
	must(t, "nomad", "volume", "create", spec)
	source := e.volume(t, id)
	_, sourceDS := dataset(t, source)
	e.runJob(t, e.workload(t, id+"-writer", id, false,
		"set -e; dd if=/dev/urandom of=/data/first bs=1M count=8 2>/dev/null; echo one > /data/log; sync"), id+"-writer")
	e.released(t, id)

	moved := "stale-dst"
	move := "zfs-csi ctl move-volume " + moved + " " + source.ExternalID
	_, err := e.onPeer(t, 5*time.Minute, move)
	if err == nil || !strings.Contains(err.Error(), "Aborted") {
		t.Fatalf("the first round: %v (want ABORTED with its progress)", err)
	}
	t.Logf("round 1, run on %s: %v", e.peer, err)

	rounds := pullRounds(t, sourceDS)
	if len(rounds) != 1 {
		t.Fatalf("after the first round %s holds the rounds %v, want one", sourceDS, rounds)
	}
	pullFor := strings.TrimSpace(must(t, "zfs", "get", "-H", "-o", "value", "zfs.csi.dev:pull-for", rounds[0]))
	if pullFor == "" || pullFor == "-" {
		t.Fatalf("the round %s carries no zfs.csi.dev:pull-for", rounds[0])
	}
	stale := sourceDS + "@csi-clone-pull-" + staleRoundNonce
	must(t, "zfs", "snapshot", "-o", "zfs.csi.dev:internal=true", "-o", "zfs.csi.dev:pull-for="+pullFor, stale)
	t.Logf("planted %s beside the real round %s (pull-for %s)", stale, rounds[0], pullFor)

	// More writes after the stale round; the job prints every file's sum.
	sums := "cd /data && sha256sum * | sort -k 2"
	_, before := e.runJob(t, e.workload(t, id+"-appender", id, false,
		"set -e; head -c 2097152 /dev/urandom >> /data/first; echo two >> /data/log; dd if=/dev/urandom of=/data/last bs=64k count=16 2>/dev/null; sync; "+sums),
		id+"-appender")
	if !strings.Contains(before, " last") {
		t.Fatalf("the appender printed %q: no sum of the last file", before)
	}
	e.released(t, id)

	var final struct {
		Volume struct {
			VolumeID      string            `json:"volume_id"`
			VolumeContext map[string]string `json:"volume_context"`
		} `json:"volume"`
	}
	finals := 0
	e2eutil.Eventually(t, 10*time.Minute, "the final round on "+e.peer, func() (bool, error) {
		finals++
		out, err := e.onPeer(t, 5*time.Minute, "zfs-csi ctl move-volume --final "+moved+" "+source.ExternalID)
		if err != nil {
			// docs/across-nodes.md: a long round answers ABORTED, a
			// source still in use or changed FAILED_PRECONDITION; again.
			if strings.Contains(err.Error(), "Aborted") || strings.Contains(err.Error(), "FailedPrecondition") {
				t.Logf("final round, try %d: %v", finals, err)
				return false, err
			}
			t.Fatalf("the final round: %v", err)
		}
		if err := json.Unmarshal([]byte(out), &final); err != nil {
			t.Fatalf("the final round printed %q: %v", out, err)
		}
		return true, nil
	})
	movedNode, movedDS, _ := strings.Cut(final.Volume.VolumeID, ":")
	if movedNode != e.peer {
		t.Fatalf("the final round made %s, want a volume on %s", final.Volume.VolumeID, e.peer)
	}
	e.onNode(t, e.node, sourceDS, false)
	e.onNode(t, e.peer, movedDS, true)

	must(t, "nomad", "volume", "deregister", id)
	must(t, "nomad", "volume", "register", e.registerSpec(t, moved, final.Volume.VolumeID, final.Volume.VolumeContext, e.peer))
	placed, after := e.runJob(t, e.workload(t, moved+"-sums", moved, false, sums), moved+"-sums")
	if placed != e.peer || after != before {
		t.Errorf("the moved volume on %s holds\n%s\nthe source held\n%s\n(want the same, on %s)", placed, after, before, e.peer)
	} else {
		t.Logf("the moved volume on %s after %d final tries holds what the source held:\n%s", e.peer, finals, after)
	}
	e.noPullLeft(t)
	must(t, "nomad", "volume", "delete", moved)
	e.onNode(t, e.peer, movedDS, false)
}

// pullRounds lists the round snapshots (csi-clone-pull-…) of a dataset of
// this host.
func pullRounds(t *testing.T, ds string) []string {
	t.Helper()
	var rounds []string
	for _, name := range strings.Fields(must(t, "zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-d", "1", ds)) {
		if strings.Contains(name, "@csi-clone-pull-") {
			rounds = append(rounds, name)
		}
	}
	return rounds
}

// noPullLeft waits until neither node holds a pull's round snapshot or
// anything received under <pool>/csi/_incoming (the container itself may
// stay: controller.IncomingContainer).
func (e *env) noPullLeft(t *testing.T) {
	t.Helper()
	incoming := e.pool + "/csi/_incoming/"
	for _, node := range []string{e.node, e.peer} {
		e2eutil.Eventually(t, 2*time.Minute, "no round or received dataset on "+node, func() (bool, error) {
			var left []string
			for _, ds := range e.datasets(t, node) {
				if strings.Contains(ds, "@csi-clone-pull-") || strings.HasPrefix(ds, incoming) {
					left = append(left, ds)
				}
			}
			return len(left) == 0, fmt.Errorf("left: %v", left)
		})
	}
}

// 4h. Rotating the CA shuts out a connection already open
// (docs/across-nodes.md, "Shutting a node out"): after a restore of
// node-a's snapshot on node-b, node-b holds a connection to node-a's
// channel. node-a's CA file replaced by a new CA's, node-b's next call on
// it is refused (the documented bound: from the next call on, whatever
// connections it holds), and node-a logs the refusal of node-b; with the
// CA file back, the same restore is made.
func testCARotation(t *testing.T, e *env) {
	id := "ca-src"
	spec := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.node + `"`, `"10GiB"`: `"64MiB"`})
	must(t, "nomad", "volume", "create", spec)
	_, ds := dataset(t, e.volume(t, id))
	e.runJob(t, e.workload(t, id+"-writer", id, false, blobScript), id+"-writer")
	snapID := e.snapshot(t, id, "ca")
	restore := func(name string) string {
		return e.spec(t, "volume-from-snapshot.hcl", map[string]string{`"pg-data-restore"`: `"` + name + `"`,
			`"@NODE@:tank/csi/pg-data@nightly"`: `"` + snapID + `"`, `"@NODE@"`: `"` + e.peer + `"`, `"10GiB"`: `"64MiB"`})
	}
	first, second := "ca-restore-1", "ca-restore-2"
	e2eutil.Eventually(t, 10*time.Minute, "the first restore on "+e.peer, func() (bool, error) {
		_, err := run("nomad", "volume", "create", restore(first))
		return err == nil, err
	})
	t.Logf("after the first restore, connections to %s's channel (ss):\n%s", e.node, channelConnections())

	caFile := peerCAFile(t)
	original, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { replaceFile(t, caFile, original) })
	_, _, newCA := anotherCA(t)
	replaceFile(t, caFile, newCA)
	rotated := time.Now()
	out, err := run("nomad", "volume", "create", restore(second))
	took := time.Since(rotated)
	if err == nil {
		t.Fatalf("the first restore after %s's CA file was replaced was made (%s after): %s", e.node, took.Round(time.Millisecond), out)
	}
	t.Logf("the first call after the rotation was refused %s after it: %v", took.Round(time.Millisecond), err)
	if !strings.Contains(err.Error(), "Unauthenticated") {
		t.Errorf("the refusal does not say Unauthenticated")
	}
	var refusal string
	e2eutil.Eventually(t, 30*time.Second, e.node+"'s log of the refusal of "+e.peer, func() (bool, error) {
		journal, err := run("journalctl", "-u", "zfs-csi", "-o", "cat", "--no-pager", "--since", "@"+strconv.FormatInt(rotated.Unix()-1, 10))
		for _, line := range strings.Split(journal, "\n") {
			if strings.Contains(line, `"caller":"`+e.peer+`"`) && strings.Contains(line, `"code":"Unauthenticated"`) {
				refusal = line
				return true, nil
			}
		}
		return false, err
	})
	t.Logf("%s logged: %s", e.node, refusal)
	t.Logf("connections to %s's channel after the refusal (ss):\n%s", e.node, channelConnections())
	time.Sleep(3 * time.Second) // node-b publishes its zfs list every second
	for _, name := range e.datasets(t, e.peer) {
		if strings.Contains(name, second) || strings.HasPrefix(name, e.pool+"/csi/_incoming/") {
			t.Errorf("%s holds %s after the refused restore", e.peer, name)
		}
	}
	if out, err := run("nomad", "volume", "status", second); err == nil {
		t.Errorf("Nomad registered the refused restore:\n%s", out)
	}

	replaceFile(t, caFile, original)
	restored := time.Now()
	e2eutil.Eventually(t, 10*time.Minute, "the restore on "+e.peer+" with the CA file back", func() (bool, error) {
		_, err := run("nomad", "volume", "create", restore(second))
		return err == nil, err
	})
	t.Logf("with the CA file back, the restore was made %s after", time.Since(restored).Round(time.Second))
	for _, name := range []string{first, second} {
		_, restoredDS := dataset(t, e.volume(t, name))
		must(t, "nomad", "volume", "delete", name)
		e.onNode(t, e.peer, restoredDS, false)
	}
	must(t, "nomad", "volume", "snapshot", "delete", pluginID, snapID)
	must(t, "nomad", "volume", "delete", id)
	e.onNode(t, e.node, ds, false)
}

// peerCAFile is the CA file this host's daemon reads: ZFS_CSI_PEER_CA in
// /etc/default/zfs-csi, where suite.sh set it.
func peerCAFile(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/etc/default/zfs-csi")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), "ZFS_CSI_PEER_CA="); ok {
			return strings.Trim(value, `"'`)
		}
	}
	t.Fatal("/etc/default/zfs-csi sets no ZFS_CSI_PEER_CA")
	return ""
}

// replaceFile puts data in place of path by a rename, as a tool that
// renews certificates does: the daemon reads the old file or the new one,
// never half of one.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".e2e-new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// channelConnections lists the TCP connections established to this host's
// peer channel port, for the log.
func channelConnections() string {
	out, err := run("ss", "-Htn", "state", "established", "( sport = :"+peerPort+" )")
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(out)
}
