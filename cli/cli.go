// Package cli is zfs-csi's command line: one table of the subcommands, each
// in a package of its own, and the daemon when no subcommand is named.
//
// Only the daemon (cli/daemon) builds the CSI services; every other command
// reaches them through the daemon's socket or reads ZFS and the mount table
// itself, so that it tells the truth when the daemon is down or confused.
package cli

import (
	"errors"
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
}

// commands is the table of subcommands. A function, not a variable, so that
// help can list the table it is part of.
func commands() []command {
	return []command{
		{"ctl", "call the daemon's CSI services (create-volume, stage, publish, list-snapshots, …) and print the response as JSON", ctl.Run},
		{"doctor", "look for what the driver cannot repair by itself and say what to do; exits 1 when it finds something", report.Doctor},
		{"help", "list the subcommands", func(_ []string, stdout, _ io.Writer) error {
			writeHelp(stdout)
			return nil
		}},
		{"nomad-bridge", "on a Nomad client, serve the daemon's socket in the plugin job's allocations and nowhere else (zfs-csi-nomad.service)", nomadbridge.Run},
		{"snapshots", "list the snapshots the driver made on this host (read from ZFS)", report.Snapshots},
		{"status", "pools, parent datasets, capacity, reaper backlog, and whether the daemon and its kubelet registration answer", report.Status},
		{"volumes", "list the driver's volumes on this host, with where they are staged and published (read from ZFS and the mount table)", report.Volumes},
	}
}

// Main runs the subcommand args name, or the daemon when args name none (or
// "serve"), and returns the process's exit status. version is the binary's.
func Main(version string, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	} else if len(args) > 0 {
		for _, command := range commands() {
			if command.name != args[0] {
				continue
			}
			if err := command.run(args[1:], stdout, stderr); err != nil {
				fmt.Fprintf(stderr, "zfs-csi %s: %v\n", command.name, err)
				if errors.As(err, new(envflag.ConfigError)) {
					return daemon.ExitConfig
				}
				return 1
			}
			return 0
		}
	}
	if err := daemon.Run(version, args, stderr); err != nil {
		fmt.Fprintln(stderr, "zfs-csi:", err)
		return daemon.ExitCode(err)
	}
	return 0
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
