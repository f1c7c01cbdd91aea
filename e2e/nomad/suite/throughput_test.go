package suite

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// A cross-node restore's stream against bare `zfs send |
// zfs receive` over the same link between the same two guests. The bare
// side is the cheapest equal work: node-a's `zfs send` (the driver's flags)
// copied by Go into a plain TCP connection, node-b's TestBareReceiver
// copying it into `zfs receive -s -u`; no TLS, no gRPC, no checks. A
// second bare side does the same through TLS 1.3 with the nodes' peer
// certificates: what encryption on the wire costs by itself, apart from the
// channel's gRPC and checks. The channel's side is the pull the restore made, as node-b's daemon logged it
// ("pulling" with the time to first byte, "pull stream ended" with bytes
// and duration): the stream alone, without Nomad's retries around it.

// bareReceiverPort and bareTLSPort are where node-b's TestBareReceiver
// listens: plain TCP, and TLS 1.3.
const (
	bareReceiverPort = "7444"
	bareTLSPort      = "7445"
)

// throughputMiB is the size of the data the restore moves.
const throughputMiB = 128

func testThroughputAcrossNodes(t *testing.T, e *env) {
	id := "tp-src"
	spec := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.node + `"`, `"10GiB"`: `"512MiB"`})
	must(t, "nomad", "volume", "create", spec)
	_, ds := dataset(t, e.volume(t, id))
	e.runJob(t, e.workload(t, id+"-writer", id, false,
		fmt.Sprintf("set -e; dd if=/dev/urandom of=/data/big bs=1M count=%d 2>/dev/null; sync", throughputMiB)), id+"-writer")
	snapID := e.snapshot(t, id, "tp")
	_, snapshot, _ := strings.Cut(snapID, ":")

	bareBefore, bareBytes := e.bareSend(t, snapshot, false)
	bareTLS, _ := e.bareSend(t, snapshot, true)

	restored := "tp-restored"
	restore := e.spec(t, "volume-from-snapshot.hcl", map[string]string{`"pg-data-restore"`: `"` + restored + `"`,
		`"@NODE@:tank/csi/pg-data@nightly"`: `"` + snapID + `"`, `"@NODE@"`: `"` + e.peer + `"`, `"10GiB"`: `"512MiB"`})
	e2eutil.Eventually(t, 15*time.Minute, "the restore on "+e.peer+" to be created", func() (bool, error) {
		_, err := run("nomad", "volume", "create", restore)
		return err == nil, err
	})
	_, restoredDS := dataset(t, e.volume(t, restored))
	pull := e.peerPull(t, path.Base(restoredDS))

	bareAfter, _ := e.bareSend(t, snapshot, false)
	bare := min(bareBefore, bareAfter)
	mib := func(bytes int64, d time.Duration) float64 { return float64(bytes) / (1 << 20) / d.Seconds() }
	t.Logf("cross-node restore of %d MiB between %s and %s over their link (stream %d MiB): pull %s (%.1f MiB/s) in %d stream(s), "+
		"first byte after %s; bare zfs send | TCP | zfs receive %s and %s (%.1f MiB/s at best): ratio %.2f; "+
		"bare through TLS 1.3 %s (%.1f MiB/s): ratio %.2f",
		throughputMiB, e.node, e.peer, pull.bytes>>20, pull.duration.Round(time.Millisecond), mib(pull.bytes, pull.duration), pull.streams,
		pull.firstByte.Round(time.Millisecond), bareBefore.Round(time.Millisecond), bareAfter.Round(time.Millisecond),
		mib(bareBytes, bare), pull.duration.Seconds()/bare.Seconds(),
		bareTLS.Round(time.Millisecond), mib(bareBytes, bareTLS), pull.duration.Seconds()/bareTLS.Seconds())
	if pull.bytes < bareBytes {
		t.Errorf("the pull moved %d bytes, the bare stream %d", pull.bytes, bareBytes)
	}

	must(t, "nomad", "volume", "delete", restored)
	e.onNode(t, e.peer, restoredDS, false)
	must(t, "nomad", "volume", "snapshot", "delete", pluginID, snapID)
	must(t, "nomad", "volume", "delete", id)
	e.onNode(t, e.node, ds, false)
}

// bareSend streams snapshot, as the driver's zfs send makes it, to node-b's
// bare receiver (through TLS when overTLS) and returns the time until
// node-b's zfs receive ended.
func (e *env) bareSend(t *testing.T, snapshot string, overTLS bool) (time.Duration, int64) {
	t.Helper()
	started := time.Now()
	port := bareReceiverPort
	if overTLS {
		port = bareTLSPort
	}
	tcp, err := net.DialTimeout("tcp", net.JoinHostPort(e.peerAddress(t), port), 30*time.Second)
	if err != nil {
		t.Fatalf("node-b's bare receiver: %v", err)
	}
	defer tcp.Close()
	conn := halfCloser(tcp.(*net.TCPConn))
	if overTLS {
		conn = tls.Client(tcp, bareTLSConfig(t, e.node))
	}
	send := exec.Command("zfs", "send", "-L", "-e", "-c", snapshot)
	stream, err := send.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	send.Stderr = &stderr
	if err := send.Start(); err != nil {
		t.Fatal(err)
	}
	n, copyErr := io.CopyBuffer(conn, stream, make([]byte, 1<<20))
	if err := errors.Join(copyErr, send.Wait()); err != nil {
		t.Fatalf("zfs send %s: %v: %s", snapshot, err, stderr.String())
	}
	_ = conn.CloseWrite()
	reply, err := bufio.NewReader(conn).ReadString('\n')
	took := time.Since(started)
	if err != nil || !strings.HasPrefix(reply, "ok") {
		t.Fatalf("node-b's bare receive of %d bytes: %q %v", n, reply, err)
	}
	return took, n
}

// halfCloser is a connection whose sending half closes alone.
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// bareTLSConfig is TLS 1.3 between the nodes with node's peer certificate
// (suite.sh installs them in ZFS_CSI_E2E_PEER_CERTS), the other side's
// checked against their CA, both ways.
func bareTLSConfig(t *testing.T, node string) *tls.Config {
	t.Helper()
	dir := os.Getenv("ZFS_CSI_E2E_PEER_CERTS")
	if dir == "" {
		t.Skip("ZFS_CSI_E2E_PEER_CERTS is not set")
	}
	certificate, err := tls.LoadX509KeyPair(filepath.Join(dir, node+".pem"), filepath.Join(dir, node+".key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("no CA certificate in " + dir)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{certificate},
		RootCAs: pool, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
		// The certificates name nodes by a URI, not a host name: the
		// chain is what is checked here.
		InsecureSkipVerify: true, VerifyPeerCertificate: verifyChain(pool)}
}

// verifyChain checks the peer's certificate against pool.
func verifyChain(pool *x509.CertPool) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("no certificate")
		}
		leaf, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return err
		}
		_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err
	}
}

// peerAddress is node-b's address on the link (suite.sh's plan).
func (e *env) peerAddress(t *testing.T) string {
	t.Helper()
	address := os.Getenv("ZFS_CSI_E2E_PEER_ADDRESS")
	if address == "" {
		t.Skip("ZFS_CSI_E2E_PEER_ADDRESS is not set")
	}
	return address
}

// pullFigures is one pull as node-b's daemon logged it.
type pullFigures struct {
	bytes     int64
	duration  time.Duration
	firstByte time.Duration
	streams   int // streams that ended
	started   int
	resumed   int // streams that began from a resume token
}

// peerPull reads node-b's published pull lines for volume: its streams'
// bytes and durations added up, and the first one's time to first byte.
// node-b publishes its log a few seconds behind: it waits until every
// stream that began has ended.
func (e *env) peerPull(t *testing.T, volume string) pullFigures {
	t.Helper()
	var got pullFigures
	e2eutil.Eventually(t, time.Minute, "node-b's log of the pull of "+volume, func() (bool, error) {
		data, err := os.ReadFile(filepath.Join(e.peerResults, "pulls.txt"))
		if err != nil {
			return false, err
		}
		got = pullFigures{}
		for _, line := range strings.Split(string(data), "\n") {
			var entry struct {
				Message   string  `json:"message"`
				Dataset   string  `json:"dataset"`
				Bytes     int64   `json:"bytes"`
				Duration  float64 `json:"duration"`         // ms (zerolog's default)
				FirstByte float64 `json:"first_byte_after"` // ms
				Resumed   bool    `json:"resumed"`
			}
			if json.Unmarshal([]byte(line), &entry) != nil || path.Base(entry.Dataset) != volume {
				continue
			}
			switch entry.Message {
			case "pulling":
				got.started++
				if entry.Resumed {
					got.resumed++
				}
				if got.streams == 0 {
					got.firstByte = time.Duration(entry.FirstByte * float64(time.Millisecond))
				}
			case "pull stream ended":
				got.streams++
				got.bytes += entry.Bytes
				got.duration += time.Duration(entry.Duration * float64(time.Millisecond))
			}
		}
		return got.streams > 0 && got.streams >= got.started,
			fmt.Errorf("%d \"pulling\" and %d \"pull stream ended\" lines for %s in %d bytes", got.started, got.streams, volume, len(data))
	})
	return got
}

// TestBareReceiver is node-b's side of the bare stream, run by suite.sh
// (not by the scenarios): each connection's bytes go into `zfs receive -s
// -u` of a scratch dataset, whose end is answered "ok" (or "error ...")
// before the dataset is destroyed again. It serves until the scenarios are
// done.
func TestBareReceiver(t *testing.T) {
	listen, target, done := os.Getenv("ZFS_CSI_E2E_BARE_LISTEN"), os.Getenv("ZFS_CSI_E2E_BARE_DATASET"), os.Getenv("ZFS_CSI_E2E_DONE")
	if listen == "" || target == "" || done == "" {
		t.Skip("node-b's bare receiver runs from suite.sh (ZFS_CSI_E2E_BARE_LISTEN, _DATASET, ZFS_CSI_E2E_DONE)")
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatal(err)
	}
	config := bareTLSConfig(t, os.Getenv("ZFS_CSI_E2E_NODE"))
	var listeners []*net.TCPListener
	for _, port := range []string{bareReceiverPort, bareTLSPort} {
		listener, err := net.Listen("tcp", net.JoinHostPort(host, port))
		if err != nil {
			t.Fatal(err)
		}
		defer listener.Close()
		listeners = append(listeners, listener.(*net.TCPListener))
	}
	for {
		if _, err := os.Stat(done); err == nil {
			return
		}
		for i, listener := range listeners {
			_ = listener.SetDeadline(time.Now().Add(time.Second))
			tcp, err := listener.AcceptTCP()
			if err != nil {
				continue
			}
			var conn net.Conn = tcp
			if i == 1 {
				conn = tls.Server(tcp, config)
			}
			reply := "ok\n"
			if err := bareReceive(conn, target); err != nil {
				reply = "error " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
			}
			_, _ = conn.Write([]byte(reply))
			conn.Close()
			_, _ = exec.Command("zfs", "destroy", "-r", target).CombinedOutput()
		}
	}
}

func bareReceive(conn net.Conn, target string) error {
	receive := exec.Command("zfs", "receive", "-s", "-u", target)
	stdin, err := receive.StdinPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	receive.Stderr = &stderr
	if err := receive.Start(); err != nil {
		return err
	}
	_, copyErr := io.CopyBuffer(stdin, conn, make([]byte, 1<<20))
	stdin.Close()
	if err := errors.Join(copyErr, receive.Wait()); err != nil {
		return fmt.Errorf("%w: %s", err, stderr.String())
	}
	return nil
}
