package daemon

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// listenNotify plays systemd's side: a datagram socket that receives what
// sdNotify sends.
func listenNotify(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func receive(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotify(t *testing.T) {
	t.Run("a path socket receives the state lines in one datagram", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "notify")
		conn := listenNotify(t, path)
		t.Setenv("NOTIFY_SOCKET", path)
		sent, err := sdNotify(notifyReadyLine, notifyStatusLine("serving\non two sockets"))
		if err != nil || !sent {
			t.Fatalf("Notify = %v, %v", sent, err)
		}
		if got, want := receive(t, conn), "READY=1\nSTATUS=serving on two sockets"; got != want {
			t.Errorf("received %q, want %q", got, want)
		}
	})

	t.Run("an abstract socket named with @ receives the state", func(t *testing.T) {
		name := fmt.Sprintf("@zfs-csi-notify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
		conn := listenNotify(t, name)
		t.Setenv("NOTIFY_SOCKET", name)
		if sent, err := sdNotify(notifyStoppingLine); err != nil || !sent {
			t.Fatalf("Notify = %v, %v", sent, err)
		}
		if got := receive(t, conn); got != "STOPPING=1" {
			t.Errorf("received %q", got)
		}
	})

	t.Run("without NOTIFY_SOCKET nothing is sent and nothing fails", func(t *testing.T) {
		t.Setenv("NOTIFY_SOCKET", "")
		if sent, err := sdNotify(notifyReadyLine); sent || err != nil {
			t.Errorf("Notify = %v, %v; want false, nil", sent, err)
		}
	})

	t.Run("a relative socket name is refused", func(t *testing.T) {
		t.Setenv("NOTIFY_SOCKET", "run/notify")
		if _, err := sdNotify(notifyReadyLine); err == nil {
			t.Error("Notify accepted a relative socket name")
		}
	})

	t.Run("a socket nobody listens on is an error", func(t *testing.T) {
		t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone"))
		if _, err := sdNotify(notifyReadyLine); err == nil {
			t.Error("Notify reported success without a listener")
		}
	})
}
