package guest

import (
	"os"
	"os/exec"
	"path/filepath"
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

// The same interruption must take the control plane down too. make signals
// its process group and then sends its child a TERM of its own; under set -e
// the second one ended run.sh's EXIT trap half-way, before cp_stop's KILL, and an
// apiserver that had ignored the first TERM (its etcd already gone) held port
// 6443 after the run. This runs cp_stop under at_exit, as run.sh does, below
// a make, with a stand-in apiserver that ignores TERM, and signals make's
// group while the script waits on a pipeline, as run.sh waits on its guest.
func TestAnInterruptedRunTakesItsControlPlaneDown(t *testing.T) {
	dir := t.TempDir()
	marker := "zfs-csi-apiserver-stand-in-" + strconv.Itoa(os.Getpid())
	script := `set -euo pipefail
source ../traps.sh
source ../k8s/control-plane.sh
CP_DIR=` + dir + ` CP_STOP_GRACE=1
cp_spawn apiserver bash -c 'trap "" TERM; exec -a ` + marker + ` sleep 300'
at_exit 'cp_stop; echo cleaned up'
bash -c 'exec -a ` + marker + `-guest sleep 300' | cat
`
	if err := os.WriteFile(dir+"/run.sh", []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	makefile := "run:\n\tbash " + dir + "/run.sh\n"
	if err := os.WriteFile(dir+"/Makefile", []byte(makefile), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &strings.Builder{}
	cmd := exec.Command("make", "--no-print-directory", "-f", dir+"/Makefile")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = exec.Command("pkill", "-KILL", "-f", marker).Run() }()
	// Signalled once the script waits on its pipeline, as run.sh waits on
	// its guest, and not before: a TERM between two commands is acted on
	// at once.
	if !waitFor(func() bool { return running(marker + "-guest") }) {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("the stand-in guest never ran: %s", out)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	_ = cmd.Wait()
	if !waitFor(func() bool { return !running(marker + " 300") }) {
		t.Errorf("a TERM to make's process group left the apiserver running; the run said:\n%s", out)
	}
	if !waitFor(func() bool { return strings.Contains(out.String(), "cleaned up") }) {
		t.Errorf("the EXIT trap did not run to its end; the run said:\n%s", out)
	}
}

// Every host script sets its EXIT trap through at_exit: a bare trap is the
// one a second TERM cuts short.
func TestHostScriptsSetExitTrapsThroughAtExit(t *testing.T) {
	paths, err := filepath.Glob("../*.sh")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("../*/*.sh")
	paths = append(paths, more...)
	bare := regexp.MustCompile(`(?m)^\s*trap\s+.*\sEXIT\s*$`)
	checked := 0
	for _, path := range paths {
		if strings.HasSuffix(path, "/traps.sh") {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, line := range bare.FindAll(b, -1) {
			if strings.TrimSpace(string(line)) != "trap - EXIT" {
				t.Errorf("%s sets an EXIT trap without at_exit: %s", path, strings.TrimSpace(string(line)))
			}
		}
	}
	if checked < 5 {
		t.Fatalf("only %d scripts found under e2e", checked)
	}
}
