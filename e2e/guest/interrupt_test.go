package guest

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// guestLaunch is run.sh's line that runs a guest's qemu under timeout(1),
// up to the qemu argv.
var guestLaunch = regexp.MustCompile(`(?m)^\s*(timeout [^\n]*?)"\$\{qemu\[@\]\}"`)

// An interrupted make (Ctrl-C, or a CI runner's TERM to the process group)
// must take its guests down with it: a qemu left behind holds 5 GiB and,
// with the control plane, port 6443, and the next run cannot start. GNU
// timeout moves itself to a process group of its own unless --foreground,
// where the terminal's signals never reach it. This runs run.sh's own
// timeout line in a pipeline as run.sh does, with sleep for qemu, signals the
// group, and wants the sleep gone.
func TestAnInterruptedRunTakesItsGuestDown(t *testing.T) {
	run, err := os.ReadFile("../run.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := guestLaunch.FindSubmatch(run)
	if m == nil {
		t.Fatal(`run.sh has no timeout line that runs "${qemu[@]}"`)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		marker := "zfs-csi-guest-stand-in-" + strconv.Itoa(os.Getpid()) + "-" + sig.String()
		// exec -a names the stand-in so that it can be found, whatever
		// became of its parent.
		script := `E2E_TIMEOUT=300; ` + string(m[1]) + ` bash -c 'exec -a ` + strings.ReplaceAll(marker, " ", "-") + ` sleep 300' </dev/null 2>&1 | cat`
		cmd := exec.Command("bash", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if !waitFor(func() bool { return running(marker) }) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("the stand-in for qemu never ran (%s)", script)
		}
		_ = syscall.Kill(-cmd.Process.Pid, sig)
		if !waitFor(func() bool { return !running(marker) }) {
			t.Errorf("%s to the run's process group left the guest running: %s", sig, m[1])
		}
		// Not waited for before the check: bash waits for its foreground
		// pipeline before it acts on SIGINT, which would let the stand-in
		// run out its own time.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = exec.Command("pkill", "-KILL", "-f", marker).Run()
		_ = cmd.Wait()
	}
}

// running reports whether a process whose command line holds marker runs.
func running(marker string) bool {
	return exec.Command("pgrep", "-f", marker).Run() == nil
}

func waitFor(ok func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ok() {
			return true
		}
	}
	return false
}
