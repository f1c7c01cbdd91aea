// Package cli is zfs-csi's command line: one table of the subcommands, each
// in a package of its own, and the daemon when no subcommand is named.
//
// Only the daemon (cli/daemon) builds the CSI services; every other command
// reaches them through the daemon's socket or reads ZFS and the mount table
// itself, so that it tells the truth when the daemon is down or confused.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/zfs-csi/zfs-csi/cli/ctl"
	"github.com/zfs-csi/zfs-csi/cli/daemon"
	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/cli/nomadbridge"
	"github.com/zfs-csi/zfs-csi/cli/report"
)

// command is one subcommand: zfs-csi NAME [FLAGS].
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
	// unit is true for a command that runs as a unit whose environment is
	// the daemon's configuration file: like the daemon, it refuses a
	// ZFS_CSI_ variable that no command reads (checkVariables).
	unit bool
}

// commands is the table of subcommands. A function, not a variable, so that
// help can list the table it is part of.
func commands() []command {
	return []command{
		{"ctl", "call the daemon's CSI services (create-volume, stage, publish, list-snapshots, …) and print the response as JSON", ctl.Run, false},
		{"doctor", "look for what the driver cannot repair by itself and say what to do; exits 1 when it finds something", report.Doctor, false},
		{"help", "list the subcommands (zfs-csi --help also lists the daemon's flags)", func(_ []string, stdout, _ io.Writer) error {
			writeHelp(stdout)
			return nil
		}, false},
		{"nomad-bridge", "on a Nomad client, serve the daemon's socket in the plugin job's allocations and nowhere else (zfs-csi-nomad.service)", nomadbridge.Run, true},
		{"snapshots", "list the snapshots the driver made on this host (read from ZFS)", report.Snapshots, false},
		{"status", "pools, parent datasets, capacity, reaper backlog, and whether the daemon and its kubelet registration answer", report.Status, false},
		{"version", "print the version", nil, false},
		{"volumes", "list the driver's volumes on this host, with where they are staged and published (read from ZFS and the mount table)", report.Volumes, false},
	}
}

// exitUsage is the status of a command line that names no command zfs-csi
// has: a wrong command line like any other (ctl.ExitUsage, sysexits'
// EX_USAGE), never doctor's "could not look".
const exitUsage = ctl.ExitUsage

// Main runs the subcommand args name, or the daemon when args name none (or
// "serve"), and returns the process's exit status. version is the binary's.
func Main(version string, args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
	case args[0] == "serve":
		args = args[1:]
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help":
		writeHelp(stdout)
		fmt.Fprintln(stdout, "\nThe daemon's flags (each also read from the variable in brackets):")
		flags := daemon.Flags()
		flags.SetOutput(stdout)
		flags.PrintDefaults()
		return 0
	case args[0] == "version" || args[0] == "--version" || args[0] == "-version":
		fmt.Fprintln(stdout, "zfs-csi", version)
		return 0
	case strings.HasPrefix(args[0], "-"):
	default:
		command, ok := findCommand(args[0])
		if !ok {
			fmt.Fprintf(stderr, "zfs-csi: unknown command %q%s; zfs-csi help lists the commands\n", args[0], suggestion(args[0]))
			return exitUsage
		}
		if command.unit {
			if err := checkVariables(); err != nil {
				return exitStatus(command.name, err, stderr)
			}
		}
		return exitStatus(command.name, command.run(args[1:], stdout, stderr), stderr)
	}
	err := checkVariables()
	if err == nil {
		err = daemon.Run(version, args, stderr)
	}
	if err != nil {
		fmt.Fprintln(stderr, "zfs-csi:", err)
		pointToHelp(stderr, "zfs-csi", err)
		return daemon.ExitCode(err)
	}
	return 0
}

// pointToHelp follows the message of a command line that is wrong with one
// line that says where the flags are listed, rather than listing them all.
func pointToHelp(stderr io.Writer, command string, err error) {
	if errors.As(err, new(envflag.UsageError)) {
		fmt.Fprintf(stderr, "%s -h lists the flags\n", command)
	}
}

// checkVariables refuses a ZFS_CSI_ variable of the environment that no
// command reads: the daemon and the bridge run with the configuration file
// as their environment, where a misspelt name would otherwise be ignored.
func checkVariables() error {
	bridge, _ := nomadbridge.Flags()
	known := slices.Concat(envflag.FlagVariables(daemon.Flags()), envflag.FlagVariables(bridge), operatorVariableNames())
	return envflag.Environment().Unknown("ZFS_CSI_", known, harnessVariables)
}

// harnessVariables are the prefixes of the test harness's variables, which
// the daemons it starts inherit.
var harnessVariables = []string{"ZFS_CSI_E2E_", "ZFS_CSI_TEST_", "ZFS_CSI_BINARY"}

func findCommand(name string) (command, bool) {
	for _, command := range commands() {
		if command.name == name {
			return command, true
		}
	}
	return command{}, false
}

// exitStatus reports a command's error and gives the status it exits with:
// 0 for none or for -h (the help was what was asked), envflag.ExitConfig for
// a setting that does not parse, the status an error carries (doctor's
// findings), 1 otherwise.
func exitStatus(name string, err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "zfs-csi %s: %v\n", name, err)
	pointToHelp(stderr, "zfs-csi "+name, err)
	var status interface{ ExitStatus() int }
	switch {
	case errors.As(err, new(envflag.ConfigError)):
		return envflag.ExitConfig
	case errors.As(err, &status):
		return status.ExitStatus()
	}
	return 1
}

// suggestion names the command nearest to a mistyped one, if one is near.
func suggestion(typed string) string {
	best, bestDistance := "", 3
	for _, name := range append([]string{"serve"}, commandNames()...) {
		if distance := envflag.EditDistance(typed, name); distance < bestDistance || strings.HasPrefix(name, typed) && len(typed) > 1 {
			best, bestDistance = name, min(distance, bestDistance)
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func commandNames() []string {
	var names []string
	for _, command := range commands() {
		names = append(names, command.name)
	}
	return names
}

// writeHelp lists the daemon's invocation and every subcommand with its summary.
func writeHelp(out io.Writer) {
	fmt.Fprintln(out, "usage: zfs-csi [serve] [FLAGS]     run the CSI daemon (zfs-csi -h lists its flags)")
	fmt.Fprintln(out, "       zfs-csi COMMAND [FLAGS]     (zfs-csi COMMAND -h lists a command's flags)")
	table := commands()
	slices.SortFunc(table, func(a, b command) int { return strings.Compare(a.name, b.name) })
	for _, command := range table {
		fmt.Fprintf(out, "  %-13s %s\n", command.name, command.summary)
	}
}
