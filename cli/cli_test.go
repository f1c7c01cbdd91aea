package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHelpListsEveryOperatorCommand(t *testing.T) {
	var out bytes.Buffer
	writeHelp(&out)
	for _, name := range []string{"ctl", "doctor", "help", "snapshots", "status", "volumes"} {
		if !strings.Contains(out.String(), "\n  "+name+" ") {
			t.Errorf("help does not list %s:\n%s", name, out.String())
		}
	}
}

// configFile writes a configuration file and points the operator commands
// at it.
func configFile(t *testing.T, contents string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "zfs-csi")
	if err := os.WriteFile(file, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ZFS_CSI_CONFIG", file)
	return file
}

func TestASettingThatDoesNotParseExits78NamingIt(t *testing.T) {
	for _, test := range []struct{ variable, value string }{
		{"ZFS_CSI_KUBERNETES", "yes"},
		{"ZFS_CSI_REAP_INTERVAL", "5"},
		{"ZFS_CSI_MAX_VOLUMES_PER_NODE", "ten"},
	} {
		t.Run("the daemon with "+test.variable+"="+test.value, func(t *testing.T) {
			t.Setenv(test.variable, test.value)
			var stderr bytes.Buffer
			status := Main("test", []string{"--parent-dataset", "tank/csi", "--endpoint", "unix://" + filepath.Join(t.TempDir(), "s")}, io.Discard, &stderr)
			if status != 78 || !strings.Contains(stderr.String(), test.variable) {
				t.Errorf("exit %d, said %q; want 78 naming %s", status, stderr.String(), test.variable)
			}
		})
	}
	t.Run("an operator command with a bad value in the configuration file", func(t *testing.T) {
		file := configFile(t, "ZFS_CSI_PARENT_DATASETS=tank/csi\nZFS_CSI_NODE_ID=not a node id\n")
		var stderr bytes.Buffer
		status := Main("test", []string{"volumes"}, io.Discard, &stderr)
		if status != 78 || !strings.Contains(stderr.String(), file) {
			t.Errorf("exit %d, said %q; want 78 naming %s", status, stderr.String(), file)
		}
	})
}

func TestTheOperatorCommandsReadTheDaemonsConfigurationFile(t *testing.T) {
	t.Run("without parent datasets anywhere, the error says where it looked", func(t *testing.T) {
		file := configFile(t, "#ZFS_CSI_PARENT_DATASETS=tank/csi\n")
		for _, command := range []string{"volumes", "snapshots", "doctor", "status"} {
			var stderr bytes.Buffer
			status := Main("test", []string{command}, io.Discard, &stderr)
			if status != 78 || !strings.Contains(stderr.String(), "parent dataset") || !strings.Contains(stderr.String(), file) {
				t.Errorf("%s: exit %d, said %q; want 78 naming the parent datasets and %s", command, status, stderr.String(), file)
			}
		}
	})
	t.Run("the parent datasets the file names are the commands' own", func(t *testing.T) {
		configFile(t, "ZFS_CSI_PARENT_DATASETS=tank/csi\n")
		var stderr bytes.Buffer
		Main("test", []string{"volumes", "--timeout", "1s"}, io.Discard, &stderr)
		if strings.Contains(stderr.String(), "parent dataset is required") {
			t.Errorf("volumes did not take the file's parent datasets: %s", stderr.String())
		}
	})
}

func TestTheCommandLineOfADailyTool(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		status := Main("v1.2.3", args, &stdout, &stderr)
		return status, stdout.String(), stderr.String()
	}
	t.Run("--help lists the subcommands and the daemon's flags, and exits 0", func(t *testing.T) {
		for _, flag := range []string{"--help", "-h"} {
			status, out, _ := run(flag)
			if status != 0 || !strings.Contains(out, "\n  volumes ") || !strings.Contains(out, "-parent-dataset") {
				t.Errorf("%s: exit %d, printed %q", flag, status, out)
			}
		}
	})
	t.Run("version prints the version", func(t *testing.T) {
		for _, args := range [][]string{{"version"}, {"--version"}} {
			if status, out, _ := run(args...); status != 0 || strings.TrimSpace(out) != "zfs-csi v1.2.3" {
				t.Errorf("%v: exit %d, printed %q", args, status, out)
			}
		}
	})
	t.Run("-h of every command exits 0", func(t *testing.T) {
		for _, name := range []string{"ctl", "doctor", "snapshots", "status", "volumes", "nomad-bridge"} {
			if status, _, errOut := run(name, "-h"); status != 0 {
				t.Errorf("%s -h: exit %d: %s", name, status, errOut)
			}
		}
	})
	t.Run("an unknown command suggests the nearest and exits 64", func(t *testing.T) {
		for typed, want := range map[string]string{"volume": "volumes", "snapshot": "snapshots", "doctr": "doctor", "stats": "status"} {
			status, _, errOut := run(typed)
			if status != 64 || !strings.Contains(errOut, `did you mean "`+want+`"`) {
				t.Errorf("%s: exit %d, said %q; want 64 suggesting %s", typed, status, errOut, want)
			}
		}
		if status, _, errOut := run("frobnicate"); status != 64 || strings.Contains(errOut, "did you mean") {
			t.Errorf("frobnicate: exit %d, said %q", status, errOut)
		}
	})
	t.Run("ctl says what to do when the socket is missing", func(t *testing.T) {
		socket := filepath.Join(t.TempDir(), "csi.sock")
		status, _, errOut := run("ctl", "--endpoint", "unix://"+socket, "probe")
		if status != 1 || !strings.Contains(errOut, "is the daemon running?") {
			t.Errorf("exit %d, said %q", status, errOut)
		}
	})
}

func TestDoctorTellsFindingsFromNotLooking(t *testing.T) {
	// No ZFS here (or no pool of that name): doctor cannot look.
	configFile(t, "ZFS_CSI_PARENT_DATASETS=zfs-csi-test-no-such-pool/csi\n")
	var stderr bytes.Buffer
	if status := Main("test", []string{"doctor", "--timeout", "5s"}, io.Discard, &stderr); status != 2 {
		t.Errorf("doctor that could not read ZFS exited %d (%s), want 2: 1 means it found problems", status, stderr.String())
	}
}
