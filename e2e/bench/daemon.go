package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// daemon is one zfs-csi process under measurement.
type daemon struct {
	cmd        *exec.Cmd
	conn       *grpc.ClientConn
	identity   csi.IdentityClient
	controller csi.ControllerClient
	node       csi.NodeClient
	group      csi.GroupControllerClient
	started    time.Time
	exited     chan struct{} // closed when the process has exited
	notify     *net.UnixConn // the NOTIFY_SOCKET, open until the daemon stops (it sends STOPPING=1)
	notified   time.Duration // start to READY=1 over NOTIFY_SOCKET, when asked for
	ready      time.Duration // start to Probe answering ready=true
}

// daemonConfig says how to start a daemon.
type daemonConfig struct {
	binary  string
	dir     string   // socket, notify socket and log live here
	parent  string   // --parent-dataset
	path    string   // PATH for the daemon ("" keeps the bench's): the counting run puts its zfs wrapper first
	notify  bool     // provide a NOTIFY_SOCKET and time READY=1
	extra   []string // more flags
	logName string
}

// startDaemon runs the daemon and waits until Probe says ready.
func startDaemon(ctx context.Context, cfg daemonConfig) (*daemon, error) {
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return nil, err
	}
	socket := filepath.Join(cfg.dir, "csi.sock")
	os.Remove(socket)
	args := append([]string{"--endpoint", "unix://" + socket, "--node-id", nodeID, "--parent-dataset", cfg.parent,
		"--driver-name", driverName, "--allow-paths", "/tmp"}, cfg.extra...)
	cmd := exec.Command(cfg.binary, args...)
	logName := cfg.logName
	if logName == "" {
		logName = "driver.log"
	}
	logFile, err := os.OpenFile(filepath.Join(cfg.dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = os.Environ()
	if cfg.path != "" {
		cmd.Env = append(cmd.Env, "PATH="+cfg.path)
	}
	var notifications *net.UnixConn
	if cfg.notify {
		address := filepath.Join(cfg.dir, "notify.sock")
		os.Remove(address)
		notifications, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: address, Net: "unixgram"})
		if err != nil {
			return nil, err
		}
		cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+address)
	}
	d := &daemon{cmd: cmd, exited: make(chan struct{}), notify: notifications}
	d.started = time.Now()
	if err := cmd.Start(); err != nil {
		if notifications != nil {
			notifications.Close()
		}
		return nil, err
	}
	go func() {
		cmd.Wait()
		close(d.exited)
	}()
	if notifications != nil {
		if err := d.awaitReadyNotification(notifications); err != nil {
			d.stop()
			return nil, err
		}
	}
	if err := d.awaitProbe(ctx, socket); err != nil {
		d.stop()
		log, _ := os.ReadFile(filepath.Join(cfg.dir, logName))
		return nil, fmt.Errorf("%w; driver log:\n%s", err, lastLines(string(log), 20))
	}
	return d, nil
}

// awaitReadyNotification reads sd_notify datagrams until READY=1.
func (d *daemon) awaitReadyNotification(notifications *net.UnixConn) error {
	notifications.SetReadDeadline(time.Now().Add(time.Minute))
	buffer := make([]byte, 4096)
	for {
		n, err := notifications.Read(buffer)
		if err != nil {
			return fmt.Errorf("waiting for READY=1: %w", err)
		}
		for _, line := range strings.Split(string(buffer[:n]), "\n") {
			if line == "READY=1" {
				d.notified = time.Since(d.started)
				return nil
			}
		}
	}
}

// awaitProbe polls Probe until the daemon answers ready=true.
func (d *daemon) awaitProbe(ctx context.Context, socket string) error {
	var err error
	// A short, flat reconnect backoff: the default waits a second after the
	// first refused connection, which would count as start-up time.
	d.conn, err = grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 5 * time.Millisecond,
			Multiplier: 1, MaxDelay: 5 * time.Millisecond}, MinConnectTimeout: 5 * time.Second}))
	if err != nil {
		return err
	}
	d.identity, d.controller, d.node = csi.NewIdentityClient(d.conn), csi.NewControllerClient(d.conn), csi.NewNodeClient(d.conn)
	d.group = csi.NewGroupControllerClient(d.conn)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-d.exited:
			return errors.New("the driver exited before it was ready")
		default:
		}
		if _, statErr := os.Stat(socket); statErr == nil {
			probeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			response, err := d.identity.Probe(probeCtx, &csi.ProbeRequest{})
			cancel()
			if err == nil && response.GetReady().GetValue() {
				d.ready = time.Since(d.started)
				return nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return errors.New("the driver was not ready within a minute")
}

// stop sends SIGTERM and waits for the daemon to exit.
func (d *daemon) stop() {
	if d.conn != nil {
		d.conn.Close()
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
	}
	if d.notify != nil {
		d.notify.Close()
	}
}

// memory reads VmRSS and VmHWM (peak RSS) of the daemon from /proc.
func (d *daemon) memory() (rss, peak uint64, err error) {
	file, err := os.Open(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	defer file.Close()
	return parseStatus(file)
}

// parseStatus finds VmRSS and VmHWM (kB) in a /proc/<pid>/status.
func parseStatus(file *os.File) (rss, peak uint64, err error) {
	scanner := bufio.NewScanner(file)
	for scanner.Scan() {
		key, value, found := strings.Cut(scanner.Text(), ":")
		if !found || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", key, err)
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	if rss == 0 || peak == 0 {
		return 0, 0, errors.New("no VmRSS or VmHWM in /proc/<pid>/status")
	}
	return rss, peak, scanner.Err()
}

// quiesce waits until the daemon runs no child process (a zfs command of a
// call that returned, or of the reaper it woke), so that work the driver
// does in the background is charged to neither side of the next
// measurement. It reports whether it had to wait.
func (d *daemon) quiesce() bool {
	waited := false
	deadline := time.Now().Add(time.Minute)
	for hasChildren(d.cmd.Process.Pid) && time.Now().Before(deadline) {
		waited = true
		time.Sleep(2 * time.Millisecond)
	}
	return waited
}

// hasChildren reports whether any thread of pid has a child process.
func hasChildren(pid int) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, task := range tasks {
		if children, err := os.ReadFile(task); err == nil && len(strings.TrimSpace(string(children))) > 0 {
			return true
		}
	}
	return false
}

func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
