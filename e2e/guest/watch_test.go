package guest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A CI guest once went silent in a restore test for 1,600 s: no Go timeout
// panic, no kernel message, qemu killed at the deadline, nothing to say
// which kind of hang it was. lib.sh's watch_deadline runs here with an uptime
// file the test moves, beside a stand-in Go test binary in the share:
// heartbeats follow the uptime, and only near the deadline does the
// stand-in get SIGQUIT, with the processes and the kernel's blocked tasks
// asked for.
func TestTheWatchBeatsAndQuitsTheGoTestsNearTheDeadline(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("guest-deadline", "3600\n")
	write("uptime", "100.52 180.00\n")
	quit := filepath.Join(dir, "quit")
	// The stand-in is named as a guest's Go test binary, which all live in
	// the share; on SIGQUIT it leaves a mark, as Go's runtime leaves its
	// goroutines.
	script := `source ./lib.sh
HEARTBEAT_SECONDS=0.1
(exec -a "$SHARE/e2e.test" bash -c 'trap "echo quit >\"\$0\"; exit 2" QUIT; while :; do sleep 0.05; done' "$QUIT") &
watch_deadline`
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "SHARE="+dir, "RESULTS="+dir, "QUIT="+quit,
		"GUEST_UPTIME_FILE="+filepath.Join(dir, "uptime"), "GUEST_SYSRQ_FILE="+filepath.Join(dir, "sysrq"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// A group of its own, for the cleanup to take the stand-in too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(b))
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10 s; the watch printed:\n%s", what, out.String())
			}
		}
	}

	waitFor("a heartbeat of uptime 100", func() bool { return read("heartbeat") == "100" })
	write("uptime", "3479.99 6000.00") // 120 s and a bit before the deadline
	waitFor("a heartbeat of uptime 3479", func() bool { return read("heartbeat") == "3479" })
	time.Sleep(300 * time.Millisecond)
	if read("quit") != "" || read("sysrq") != "" {
		t.Fatalf("the watch acted 121 s before the deadline: quit %q, sysrq %q", read("quit"), read("sysrq"))
	}
	write("uptime", "3480.00 6000.00")
	waitFor("the stand-in Go test quit", func() bool { return read("quit") == "quit" })
	if read("sysrq") != "w" {
		t.Errorf("the kernel was asked for %q, want w (its blocked tasks)", read("sysrq"))
	}
	if !strings.Contains(out.String(), "WATCHDOG: 3480 s of a 3600 s deadline") || !strings.Contains(out.String(), "!!! ps: ") {
		t.Errorf("the watch printed:\n%s\nwant its warning and the processes", out.String())
	}
	waitFor("heartbeats after the warning", func() bool { return read("heartbeat") == "3480" })
}

// run.sh's last_heartbeat, on a guest killed at its deadline: a fresh
// heartbeat says the guest ran on, an old one that it or its share stopped,
// none that the watch never ran.
func TestTheHostTellsAHungTestFromAStoppedGuest(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "heartbeat")
	say := func() string {
		t.Helper()
		out, err := exec.Command("bash", "-c", `source <(sed -n '/^last_heartbeat() {$/,/^}$/p' ../run.sh) && last_heartbeat "$1"`, "bash", file).Output()
		if err != nil {
			t.Fatalf("last_heartbeat: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	if got := say(); got != "it wrote no heartbeat" {
		t.Errorf("no file: %q", got)
	}
	if err := os.WriteFile(file, []byte("3412\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The age is the file's: bash starting last_heartbeat on a loaded host
	// (guests beside make test) took 2 s, so a few seconds of slack, far
	// from the 60 s that divides the two answers.
	if got := say(); !regexp.MustCompile(`^its last heartbeat \(uptime 3412 s\) came [0-9] s before the kill: the guest ran on, and a test in it hung or its console was not read$`).MatchString(got) {
		t.Errorf("a fresh heartbeat: %q", got)
	}
	old := time.Now().Add(-1600 * time.Second)
	if err := os.Chtimes(file, old, old); err != nil {
		t.Fatal(err)
	}
	if got := say(); !regexp.MustCompile(`came 160[0-9] s before the kill: the guest stopped then, or its share did$`).MatchString(got) {
		t.Errorf("a heartbeat 1,600 s old: %q", got)
	}
}

// Every entry point of a guest run, init.sh and each systemd-booted suite,
// starts the watch: a suite without it hangs as silently as before.
func TestEveryGuestRunStartsTheWatch(t *testing.T) {
	suites, err := filepath.Glob("*/suite.sh")
	if err != nil || len(suites) < 3 {
		t.Fatalf("suites %v (%v): the glob looked in the wrong place", suites, err)
	}
	for _, path := range append(suites, "init.sh") {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^\twatch_deadline &$`).Match(b) {
			t.Errorf("%s does not start watch_deadline in the background", path)
		}
	}
}

// kubelet removes a dead container's log within seconds of its exit; the
// node's keeper has linked it by then, and the link keeps what the
// container wrote after the link was made, and after kubelet unlinked it.
func TestKeptPodLogsOutliveKubeletsRemoval(t *testing.T) {
	dir := t.TempDir()
	pods, kept := filepath.Join(dir, "pods"), filepath.Join(dir, "kept")
	logDir := filepath.Join(pods, "zfs-csi_sidecars_u1", "csi-snapshotter")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(logDir, "0.log")
	if err := os.WriteFile(log, []byte("started\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", "source ./lib.sh && keep_pod_logs")
	cmd.Env = append(os.Environ(), "POD_LOGS="+pods, "KEPT_POD_LOGS="+kept, "KEEP_SECONDS=0.05", "SHARE="+dir, "RESULTS="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	keptLog := filepath.Join(kept, "zfs-csi_sidecars_u1", "csi-snapshotter", "0.log")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(keptLog); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not kept in 10 s", log)
		}
	}
	f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("Lost connection to CSI driver, exiting\n")
	f.Close()
	if err := os.RemoveAll(filepath.Join(pods, "zfs-csi_sidecars_u1")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(keptLog)
	if string(b) != "started\nLost connection to CSI driver, exiting\n" {
		t.Errorf("kept log after kubelet removed it: %q (%v)", b, err)
	}
}
