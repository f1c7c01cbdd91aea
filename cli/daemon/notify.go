package daemon

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// Service-manager notifications (sd_notify), for a unit with Type=notify:
// systemd starts dependent units (kubelet, nomad) only after READY=1, and
// shows STATUS= in `systemctl status`.
const (
	notifyReadyLine    = "READY=1"
	notifyStoppingLine = "STOPPING=1"
)

// notifyStatusLine is a STATUS= line for sdNotify.
func notifyStatusLine(text string) string {
	return "STATUS=" + strings.ReplaceAll(text, "\n", " ")
}

// sdNotify sends state lines to the service manager over the datagram socket
// named by $NOTIFY_SOCKET. It reports false, and does nothing, when that
// variable is unset (not started by systemd, or not Type=notify).
//
// An abstract socket is named with a leading '@', which stands for the NUL
// byte that starts an abstract address; Go's net package makes that
// translation itself for unix addresses, so the name is passed as is. The
// variable is left set: the daemon notifies again when it stops. Child
// processes (zfs, mkfs) inherit it, but with the default NotifyAccess=main
// systemd ignores anything they might send.
func sdNotify(lines ...string) (bool, error) {
	socket := os.Getenv("NOTIFY_SOCKET")
	if socket == "" {
		return false, nil
	}
	if socket[0] != '/' && socket[0] != '@' {
		return false, fmt.Errorf("NOTIFY_SOCKET=%q is neither a path nor an abstract socket name", socket)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("notify %s: %w", socket, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(lines, "\n"))); err != nil {
		return false, fmt.Errorf("notify %s: %w", socket, err)
	}
	return true, nil
}
