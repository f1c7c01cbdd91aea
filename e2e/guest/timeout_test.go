package guest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goTestTimeout runs lib.sh's go_test_timeout with a share holding deadline
// (none if empty) and a kernel uptime of uptime.
func goTestTimeout(t *testing.T, deadline, uptime string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	if deadline != "" {
		if err := os.WriteFile(filepath.Join(dir, "guest-deadline"), []byte(deadline+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	up := filepath.Join(dir, "uptime")
	if err := os.WriteFile(up, []byte(uptime+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", `source ./lib.sh && go_test_timeout`)
	cmd.Env = append(os.Environ(), "SHARE="+dir, "GUEST_UPTIME_FILE="+up)
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

func TestAGoTestGetsWhatIsLeftOfTheBootsDeadline(t *testing.T) {
	for _, c := range []struct {
		deadline, uptime, want string
	}{
		// The host gave 9,000 s and the cluster took 420 s to come up:
		// 240 s are kept for the results.
		{"9000", "420.37 801.12", "8340s"},
		{"3600", "95.01 160.00", "3265s"},
		// Nearly out of time still leaves a test a minute to say what hung.
		{"3600", "3500.00 6000.00", "60s"},
	} {
		got, err := goTestTimeout(t, c.deadline, c.uptime)
		if err != nil || got != c.want {
			t.Errorf("deadline %s, uptime %s: got %q (%v), want %q", c.deadline, c.uptime, got, err, c.want)
		}
	}
	for _, deadline := range []string{"", "90m", "-1"} {
		if got, err := goTestTimeout(t, deadline, "10.0 10.0"); err == nil {
			t.Errorf("deadline %q: got %q and no error, want a refusal", deadline, got)
		}
	}
}

// A Go test binary in the guest with a fixed -test.timeout outlives a boot
// the host cut shorter, or is cut short of one the host made longer (a full
// Kubernetes run given E2E_TIMEOUT=9000 panicked at a fixed 90m).
func TestEveryGuestGoTestTakesItsTimeoutFromTheDeadline(t *testing.T) {
	fixed := regexp.MustCompile(`-test\.timeout[= ]+["']?[0-9]`)
	var users int
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".sh") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		runs := false
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			if fixed.MatchString(line) {
				t.Errorf("%s:%d: a fixed -test.timeout; take it from go_test_timeout", path, i+1)
			}
			runs = runs || strings.Contains(line, "-test.timeout")
		}
		if runs {
			users++
			if !strings.Contains(string(b), "$(go_test_timeout)") {
				t.Errorf("%s runs a Go test binary without go_test_timeout", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if users == 0 {
		t.Fatal("no guest script runs a Go test binary: the walk looked in the wrong place")
	}
	run, err := os.ReadFile("../run.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(run), `>"$SHARE/guest-deadline"`) {
		t.Error("run.sh does not write the guest's deadline that go_test_timeout reads")
	}
}
