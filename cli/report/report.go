// Package report is the operator commands (volumes, snapshots, status,
// doctor): what ZFS and the mount table say about the driver's volumes, as a
// table for people or JSON for scripts. They take the daemon's flags for
// finding its datasets but read ZFS themselves, never the daemon's memory, so
// they tell the truth when the daemon is down or confused.
package report

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/zfs-csi/zfs-csi/cli/ctl"
	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/inventory"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// operator is one run of an operator command.
type operator struct {
	cfg     rules.Config
	zfs     zfs.Interface
	host    inventory.Host
	json    bool
	timeout time.Duration
	stdout  io.Writer
}

// operatorFlags registers the flags every operator command takes; finish
// validates them after parsing and builds the operator.
func operatorFlags(flags *flag.FlagSet, stdout io.Writer) (finish func() (*operator, error)) {
	op := &operator{stdout: stdout}
	finishConfig := envflag.DriverConfig(flags, &op.cfg)
	output := flags.String("o", "table", "output: table or json")
	flags.DurationVar(&op.timeout, "timeout", time.Minute, "how long the zfs commands may take")
	flags.StringVar(&op.host.MountInfo, "mountinfo", "/proc/self/mountinfo", "the mount table to read")
	flags.StringVar(&op.host.DevDir, "dev-dir", "/dev", "where the zvol links are (DIR/zvol/<dataset>)")
	return func() (*operator, error) {
		// The operator commands read the daemon's configuration file too,
		// so that they see what it serves without repeating its settings.
		source, err := envflag.EnvironmentAndFile(envflag.ConfigFiles()...)
		if err != nil {
			return nil, err
		}
		if err := finishConfig(source); err != nil {
			return nil, err
		}
		switch *output {
		case "table":
		case "json":
			op.json = true
		default:
			return nil, usageError(flags, fmt.Errorf("-o %q: use table or json", *output))
		}
		if flags.NArg() > 0 {
			return nil, usageError(flags, fmt.Errorf("unexpected arguments %q", flags.Args()))
		}
		op.zfs = zfs.NewExec(zfs.ExecConfig{})
		return op, nil
	}
}

// parseOperator parses an operator command's arguments; extra registers the
// command's own flags.
func parseOperator(name string, args []string, stdout, stderr io.Writer, extra func(*flag.FlagSet)) (*operator, error) {
	flags := flag.NewFlagSet("zfs-csi "+name, flag.ContinueOnError)
	finish := operatorFlags(flags, stdout)
	if extra != nil {
		extra(flags)
	}
	usage := func() {
		fmt.Fprintf(stderr, "usage: %s [FLAGS] (each also read from the variable in brackets, else the daemon's configuration file)\n", flags.Name())
		flags.SetOutput(stderr)
		flags.PrintDefaults()
	}
	if err := ctl.ParseFlags(flags, args, usage, helpLine(flags)); err != nil {
		return nil, err
	}
	return finish()
}

// usageError is a wrong command line: the problem and one line that points
// to -h; the command exits ctl.ExitUsage.
func usageError(flags *flag.FlagSet, err error) error {
	return ctl.UsageError{Err: err, Help: helpLine(flags)}
}

func helpLine(flags *flag.FlagSet) string { return flags.Name() + " -h lists the flags" }

// runReport runs a report that takes only the flags every operator command takes.
func runReport(name string, args []string, stdout, stderr io.Writer, report func(*operator) error) error {
	op, err := parseOperator(name, args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	return report(op)
}

// read takes the inventory and places it on the mount table.
func (op *operator) read() (inventory.Inventory, error) {
	ctx, cancel := context.WithTimeout(context.Background(), op.timeout)
	defer cancel()
	inv, err := inventory.Read(ctx, op.zfs, op.cfg)
	if err != nil {
		return inv, err
	}
	mounts, err := op.host.Mounts()
	if err != nil {
		return inv, fmt.Errorf("reading the mount table: %w", err)
	}
	op.host.Place(&inv, mounts)
	return inv, nil
}

// writeJSON writes v indented, for scripts (and jq).
func (op *operator) writeJSON(v any) error {
	encoder := json.NewEncoder(op.stdout)
	encoder.SetIndent("", "  ")
	return encoder.Encode(v)
}

// table writes aligned columns; "" cells print as "-", and a cell with a
// control character (a CSI name may hold a TAB or a line break) prints
// Go-quoted, so that it stays in its row and column.
type table struct{ w *tabwriter.Writer }

func newTable(out io.Writer, header ...string) *table {
	t := &table{w: tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, cell := range cells {
		switch {
		case cell == "":
			cells[i] = "-"
		case strings.ContainsFunc(cell, unicode.IsControl):
			cells[i] = strconv.Quote(cell)
		}
	}
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// kindName is a volume's kind in one word: dataset, zvol/ext4, zvol/block.
func kindName(volume inventory.Volume) string {
	switch {
	case volume.Kind != rules.KindZvol:
		return volume.Kind
	case volume.FSType == "":
		return "zvol/block"
	}
	return "zvol/" + volume.FSType
}
