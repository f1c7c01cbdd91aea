package report

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/zfs-csi/zfs-csi/cli/daemon"
	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/inventory"
)

// doctor's exit statuses besides 0 (nothing found), and ExitUsage for a
// wrong command line and envflag.ExitConfig for a setting that does not
// parse: a monitoring check must tell findings from a doctor that could
// not look, and both from one that was called wrong.
const (
	// DoctorFoundProblems: doctor looked and found something to fix.
	DoctorFoundProblems = 1
	// DoctorCouldNotLook: ZFS or the mount table could not be read.
	DoctorCouldNotLook = 2
)

// errProblemsFound makes doctor exit DoctorFoundProblems after printing
// its findings.
var errProblemsFound = errors.New("problems found")

// Doctor is `zfs-csi doctor`: its findings, and an error when there are any
// (DoctorFoundProblems), or when it could not look (DoctorCouldNotLook).
func Doctor(args []string, stdout, stderr io.Writer) error {
	op, err := parseDoctor(args, stdout, stderr)
	if err != nil {
		return err
	}
	return op.diagnose()
}

// parseDoctor parses doctor's command line. The directories it looks in
// for mounts left behind are the daemon's path roots, read as the daemon
// reads them (its flags' variables, from the environment or the
// configuration file), unless --co-dir names others.
func parseDoctor(args []string, stdout, stderr io.Writer) (*operator, error) {
	coDirs, allowPaths := &envflag.List{}, &envflag.List{}
	var kubeletDir, nomadDataDir string
	op, err := parseOperator("doctor", args, stdout, stderr, func(flags *flag.FlagSet) {
		// The daemon's own flags, so that the names, the variables and
		// the defaults are the daemon's.
		daemonFlags := daemon.Flags()
		for _, daemonFlag := range []struct {
			name  string
			value *string
		}{{"kubelet-dir", &kubeletDir}, {"nomad-data-dir", &nomadDataDir}} {
			f := daemonFlags.Lookup(daemonFlag.name)
			flags.StringVar(daemonFlag.value, f.Name, f.DefValue, f.Usage)
		}
		flags.Var(allowPaths, "allow-paths", daemonFlags.Lookup("allow-paths").Usage)
		flags.Var(coDirs, "co-dir", "look for mounts left behind here instead of below --kubelet-dir, --nomad-data-dir and --allow-paths; "+
			"repeat for several [ZFS_CSI_CO_DIRS, comma-separated]")
	})
	if err != nil {
		return nil, err
	}
	op.host.CODirs = *coDirs
	if len(*coDirs) == 0 {
		op.host.CODirs = append([]string{kubeletDir, nomadDataDir}, *allowPaths...)
	}
	return op, nil
}

// diagnose runs doctor and gives its error the status it exits with.
func (op *operator) diagnose() error {
	switch err := op.doctor(); {
	case err == nil:
		return nil
	case errors.Is(err, errProblemsFound):
		return exitWith{err, DoctorFoundProblems}
	default:
		return exitWith{err, DoctorCouldNotLook}
	}
}

// exitWith is an error and the status the command exits with for it.
type exitWith struct {
	error
	status int
}

func (e exitWith) Unwrap() error   { return e.error }
func (e exitWith) ExitStatus() int { return e.status }

func (op *operator) doctor() error {
	inv, err := op.read()
	if err != nil {
		return err
	}
	mounts, err := op.host.Mounts()
	if err != nil {
		return err
	}
	findings := op.host.Diagnose(op.cfg, inv, mounts)
	if op.json {
		if findings == nil {
			findings = []inventory.Finding{}
		}
		if err := op.writeJSON(map[string]any{"findings": findings}); err != nil {
			return err
		}
	} else {
		for _, finding := range findings {
			fmt.Fprintf(op.stdout, "%s: %s\n  problem: %s\n  fix:     %s\n\n", finding.Kind, finding.Subject, finding.Problem, finding.Fix)
		}
		if len(findings) == 0 {
			fmt.Fprintf(op.stdout, "no problems found (%d volumes, %d snapshots under %s)\n",
				len(inv.Volumes), len(inv.Snapshots), strings.Join(op.cfg.ParentDatasets, ", "))
		}
	}
	if len(findings) > 0 {
		return fmt.Errorf("%w: %d", errProblemsFound, len(findings))
	}
	return nil
}
