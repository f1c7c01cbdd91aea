package main

import (
	"fmt"
	"io"
	"sort"
)

func init() {
	subcommands["help"] = struct {
		summary string
		run     func(args []string, stdout, stderr io.Writer) error
	}{
		summary: "list the subcommands",
		run: func(_ []string, stdout, _ io.Writer) error {
			writeHelp(stdout)
			return nil
		},
	}
}

// writeHelp lists the daemon's invocation and every subcommand with its summary.
func writeHelp(out io.Writer) {
	fmt.Fprintln(out, "usage: zfs-csi [serve] [FLAGS]     run the CSI daemon (zfs-csi -h lists its flags)")
	fmt.Fprintln(out, "       zfs-csi COMMAND [FLAGS]     (zfs-csi COMMAND -h lists a command's flags)")
	names := make([]string, 0, len(subcommands))
	for name := range subcommands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(out, "  %-13s %s\n", name, subcommands[name].summary)
	}
}
