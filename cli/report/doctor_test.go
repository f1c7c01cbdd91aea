package report

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/zfs-csi/zfs-csi/cli/ctl"
	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/wiring/wiringtest"
)

// daemonConfig makes file the daemon's configuration file (ZFS_CSI_CONFIG)
// with lines, and keeps the environment from setting what it sets.
func daemonConfig(t *testing.T, lines ...string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "zfs-csi")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ZFS_CSI_CONFIG", file)
	for _, line := range lines {
		variable, _, _ := strings.Cut(line, "=")
		t.Setenv(variable, "")
		os.Unsetenv(variable)
	}
}

// doctorOn parses doctor's command line on the fixture's fake pool, mount
// table and /dev.
func doctorOn(t *testing.T, f *wiringtest.Fixture, args ...string) (*operator, *bytes.Buffer) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	op, err := parseDoctor(append([]string{"--mountinfo", f.Host.MountInfo, "--dev-dir", f.Host.DevDir}, args...), &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	op.zfs = f.Fake
	return op, &stdout
}

func TestDoctorLooksWhereTheDaemonsConfigurationSays(t *testing.T) {
	daemonConfig(t, "ZFS_CSI_PARENT_DATASETS=tank/csi", "ZFS_CSI_NODE_ID="+wiringtest.NodeID,
		"ZFS_CSI_KUBELET_DIR=/srv/kubelet", "ZFS_CSI_NOMAD_DATA_DIR=/srv/nomad", "ZFS_CSI_ALLOW_PATHS=/srv/a,/srv/b")
	f, _ := sampleHost(t)
	left := []string{"/srv/kubelet/pods/pod-2/volumes/kubernetes.io~csi/pv-gone/mount", "/srv/nomad/client/csi/per-alloc/a1/gone/rw-file-system-single-node-writer",
		"/srv/b/staging/gone"}
	for _, path := range left {
		f.MountDataset("tank/csi/pvc-gone", path)
	}

	op, stdout := doctorOn(t, f)
	if want := []string{"/srv/kubelet", "/srv/nomad", "/srv/a", "/srv/b"}; !slices.Equal(op.host.CODirs, want) {
		t.Errorf("doctor looks below %q, want the daemon's %q", op.host.CODirs, want)
	}
	err := op.diagnose()
	var status interface{ ExitStatus() int }
	if !errors.As(err, &status) || status.ExitStatus() != DoctorFoundProblems {
		t.Errorf("doctor: %v, want exit status %d", err, DoctorFoundProblems)
	}
	for _, path := range left {
		if !strings.Contains(stdout.String(), "stale-mount: "+path) {
			t.Errorf("doctor does not report the mount left at %s:\n%s", path, stdout.String())
		}
	}

	t.Run("the command line wins over the file", func(t *testing.T) {
		op, _ := doctorOn(t, f, "--kubelet-dir", "/k", "--allow-paths", "/c")
		if want := []string{"/k", "/srv/nomad", "/c"}; !slices.Equal(op.host.CODirs, want) {
			t.Errorf("doctor looks below %q, want %q", op.host.CODirs, want)
		}
		op, _ = doctorOn(t, f, "--co-dir", "/only")
		if want := []string{"/only"}; !slices.Equal(op.host.CODirs, want) {
			t.Errorf("with --co-dir doctor looks below %q, want %q", op.host.CODirs, want)
		}
	})
}

// A monitoring check runs doctor: it must tell findings from a doctor that
// could not look, and both from a doctor called wrong.
func TestDoctorsExitStatusTellsFindingsFromFailures(t *testing.T) {
	daemonConfig(t, "ZFS_CSI_PARENT_DATASETS=tank/csi", "ZFS_CSI_NODE_ID="+wiringtest.NodeID)
	f, _ := sampleHost(t)
	exitStatus := func(err error) int {
		var status interface{ ExitStatus() int }
		switch {
		case err == nil:
			return 0
		case errors.As(err, new(envflag.ConfigError)):
			return envflag.ExitConfig
		case errors.As(err, &status):
			return status.ExitStatus()
		}
		return -1
	}

	op, _ := doctorOn(t, f)
	if err := op.diagnose(); exitStatus(err) != 0 {
		t.Errorf("doctor on a healthy host: %v", err)
	}
	f.MountDataset("tank/csi/pvc-gone", "/var/lib/kubelet/pods/pod-2/volumes/kubernetes.io~csi/pv-gone/mount")
	op, _ = doctorOn(t, f)
	if err := op.diagnose(); exitStatus(err) != DoctorFoundProblems {
		t.Errorf("doctor with a stale mount: %v, status %d, want %d", err, exitStatus(err), DoctorFoundProblems)
	}
	op, _ = doctorOn(t, f, "--mountinfo", filepath.Join(t.TempDir(), "absent"))
	if err := op.diagnose(); exitStatus(err) != DoctorCouldNotLook {
		t.Errorf("doctor without a mount table: %v, status %d, want %d", err, exitStatus(err), DoctorCouldNotLook)
	}

	for _, args := range [][]string{{"--bogus"}, {"-o", "yaml"}, {"extra"}, {"--timeout", "soon"}} {
		var stdout, stderr bytes.Buffer
		err := Doctor(args, &stdout, &stderr)
		if exitStatus(err) != ctl.ExitUsage {
			t.Errorf("doctor %q: %v, status %d, want %d", args, err, exitStatus(err), ctl.ExitUsage)
			continue
		}
		if lines := strings.Split(err.Error(), "\n"); len(lines) != 2 || lines[1] != "zfs-csi doctor -h lists the flags" || stderr.Len() > 0 {
			t.Errorf("doctor %q says %q and prints %q, want the problem and one line pointing to -h", args, err.Error(), stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if err := Doctor([]string{"-h"}, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "-kubelet-dir") {
		t.Errorf("doctor -h: %v, printed %q, want flag.ErrHelp and the flags", err, stderr.String())
	}

	daemonConfig(t, "ZFS_CSI_PARENT_DATASETS=tank/csi", "ZFS_CSI_NODE_ID=not a node ID")
	if err := Doctor(nil, &stdout, &stderr); exitStatus(err) != envflag.ExitConfig {
		t.Errorf("doctor with a node ID the daemon refuses: %v, status %d, want %d", err, exitStatus(err), envflag.ExitConfig)
	}
}

// docs/operations.md tells monitoring what each exit status of doctor
// means; the statuses it names must be the ones doctor exits with.
func TestTheDocumentedExitStatusesAreDoctors(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[int]string{}
	for _, row := range regexp.MustCompile(`(?m)^\| (\d+) \| (.*) \|$`).FindAllStringSubmatch(string(doc), -1) {
		status, _ := strconv.Atoi(row[1])
		documented[status] = row[2]
	}
	for status, meaning := range map[int]string{0: "found nothing", DoctorFoundProblems: "found problems", DoctorCouldNotLook: "could not look",
		ctl.ExitUsage: "wrong command line", envflag.ExitConfig: "refused"} {
		if !strings.Contains(documented[status], meaning) {
			t.Errorf("docs/operations.md says status %d means %q, want it to say %q", status, documented[status], meaning)
		}
	}
}
