package report

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/inventory"
)

// errProblemsFound makes doctor exit non-zero after printing its findings.
var errProblemsFound = errors.New("problems found")

// Doctor is `zfs-csi doctor`: its findings, and an error when there are any
// (exit status 1), or when it could not look (DoctorCouldNotLook).
func Doctor(args []string, stdout, stderr io.Writer) error {
	coDirs := &envflag.List{}
	op, err := parseOperator("doctor", args, stdout, stderr, func(flags *flag.FlagSet) {
		flags.Var(coDirs, "co-dir", "where a container orchestrator stages and publishes volumes; repeat for several (default "+
			strings.Join(inventory.DefaultCODirs(), ", ")+") [ZFS_CSI_CO_DIRS, comma-separated]")
	})
	if err != nil {
		return err
	}
	op.host.CODirs = *coDirs
	if len(*coDirs) == 0 {
		op.host.CODirs = inventory.DefaultCODirs()
	}
	if err := op.doctor(); err != nil && !errors.Is(err, errProblemsFound) {
		return couldNotLook{err}
	} else if err != nil {
		return err
	}
	return nil
}

// DoctorCouldNotLook is doctor's exit status when it could not look (ZFS
// or the mount table could not be read): a monitoring check must tell that
// from findings (status 1).
const DoctorCouldNotLook = 2

// couldNotLook is an error that kept doctor from looking.
type couldNotLook struct{ error }

func (e couldNotLook) Unwrap() error   { return e.error }
func (e couldNotLook) ExitStatus() int { return DoctorCouldNotLook }

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
