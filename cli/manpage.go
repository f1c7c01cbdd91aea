package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/zfs-csi/zfs-csi/cli/ctl"
	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/cli/report"
)

// The manual page, packaging/zfs-csi.8, is written from the command table
// and the units' flag sets (TestTheManualPageIsWrittenFromTheFlagTables
// compares them, and -update rewrites it), so its COMMANDS, OPTIONS and
// ENVIRONMENT cannot drift from what the binary takes.

// manHeader is the page up to its generated sections.
const manHeader = `.TH ZFS-CSI 8 "" "zfs-csi" "System Administration"
.SH NAME
zfs-csi \- serve ZFS datasets and zvols as CSI volumes to Kubernetes and Nomad
.SH SYNOPSIS
.B zfs-csi
.RB [ serve ]
.RI [ options ]
.br
.B zfs-csi
.I command
.RI [ arguments ]
.SH DESCRIPTION
.B zfs-csi
is a Container Storage Interface plugin. Run by systemd as
.BR zfs-csi.service ,
it serves the Identity, Controller, GroupController, Node and
SnapshotMetadata services on a local socket and turns the parent datasets
it is given into node-local volumes: datasets, or zvols (raw, or formatted
with ext4, xfs or btrfs), with native snapshots, clones, expansion,
encryption and health.
Every option can also be set by the environment variable ENVIRONMENT names
for it; the command line wins over the environment. The package's
configuration file
.RI ( /etc/default/zfs-csi
or
.IR /etc/sysconfig/zfs-csi )
documents them; the unit reads it, and so do the operator commands
.RB ( ctl ", " volumes ", " snapshots ", " status ", " doctor )
for what neither their command line nor the environment sets.
`

// manFooter is the page after its generated sections.
const manFooter = `.SH FILES
.TP
.I /run/zfs-csi/csi.sock
The default CSI socket (mode 0600: whoever can connect controls every volume
on the host).
.TP
.IR /etc/default/zfs-csi ", " /etc/sysconfig/zfs-csi
The configuration file of each family's package.
.TP
.I /etc/zfs-csi/web-config.yml
The usual place of the metrics listener's web configuration file
.RB ( \-\-metrics\-web\-config ,
.BR ZFS_CSI_METRICS_WEB_CONFIG ):
the Prometheus exporters' YAML format, with TLS
.RB ( tls_server_config )
and basic authentication
.RB ( basic_auth_users ,
bcrypt hashes). The metrics name every volume's PVC and namespace: expose
them beyond loopback only with this file. It is checked at start and read
again for every connection.
.SH SEE ALSO
.BR zfs (8),
.BR zpool (8),
.BR systemctl (1)
.PP
/usr/share/doc/zfs-csi/README.md, and the documents it links to in
/usr/share/doc/zfs-csi/docs/: configuration.md (every setting),
operations.md (the operator commands), monitoring.md (metrics and alerts),
troubleshooting.md.
`

// manExamples are the EXAMPLES section's commands and what each does.
var manExamples = [][2]string{
	{"sudo zfs-csi status", "pools, parent datasets, capacity, and whether the daemon answers"},
	{"sudo zfs-csi volumes", "the volumes, with where each is staged and published"},
	{"sudo zfs-csi doctor", "what the driver cannot repair by itself, and what to do"},
	{"sudo zfs-csi ctl create-volume demo --size 1G", "a call to the daemon's CSI services, the answer as JSON"},
	{"zfs-csi --parent-dataset tank/csi --metrics-address 9820", "the daemon by hand, with metrics on 127.0.0.1:9820"},
}

// roffEscape makes text safe in a roff line: backslashes and hyphens escaped,
// no line starting with a control character.
func roffEscape(text string) string {
	text = strings.ReplaceAll(text, `\`, `\e`)
	text = strings.ReplaceAll(text, "-", `\-`)
	if strings.HasPrefix(text, ".") || strings.HasPrefix(text, "'") {
		text = `\&` + text
	}
	var escaped strings.Builder
	for _, r := range text {
		if r > 127 { // troff reads bytes: a character beyond ASCII by its name
			fmt.Fprintf(&escaped, `\[u%04X]`, r)
			continue
		}
		escaped.WriteRune(r)
	}
	return escaped.String()
}

// writeManPage writes the manual page.
func writeManPage(out io.Writer) {
	fmt.Fprint(out, manHeader)
	fmt.Fprintln(out, ".SH COMMANDS")
	fmt.Fprintln(out, ".TP\n.B serve\nThe daemon (the default when no command is named).")
	table := commands()
	slices.SortFunc(table, func(a, b command) int { return strings.Compare(a.name, b.name) })
	for _, command := range table {
		fmt.Fprintf(out, ".TP\n.B %s\n%s.\n", roffEscape(command.name), roffEscape(upperFirst(command.summary)))
	}

	fmt.Fprintln(out, ".SH OPTIONS")
	fmt.Fprintln(out, "The daemon's options; each command lists its own with")
	fmt.Fprintln(out, ".BR \"zfs-csi \\fIcommand\\fB \\-h\" .")
	environment := map[string][]string{}
	writeManOptions(out, "", environment)
	fmt.Fprintln(out, ".SS nomad-bridge")
	fmt.Fprintln(out, "The options of")
	fmt.Fprintln(out, ".BR \"zfs-csi nomad-bridge\" ,")
	fmt.Fprintln(out, "which")
	fmt.Fprintln(out, ".B zfs-csi-nomad.service")
	fmt.Fprintln(out, "runs on a Nomad client with the same configuration file.")
	writeManOptions(out, "nomad-bridge", environment)

	fmt.Fprintln(out, ".SH ENVIRONMENT")
	for _, variable := range operatorVariables {
		environment[variable[0]] = []string{upperFirst(variable[1]) + "."}
	}
	variables := slices.Sorted(maps.Keys(environment))
	for _, variable := range variables {
		fmt.Fprintf(out, ".TP\n.B %s\n%s\n", roffEscape(variable), strings.Join(environment[variable], "\n"))
	}

	fmt.Fprintln(out, ".SH EXIT STATUS")
	for _, status := range [][2]string{
		{"0", "Success; the daemon stopped on SIGTERM or SIGINT."},
		{"1", "The command failed (the message says why); for doctor, it found problems."},
		{fmt.Sprint(report.DoctorCouldNotLook), "doctor could not look (ZFS or the mount table could not be read)."},
		{fmt.Sprint(ctl.ExitUsage), "A wrong command line: a command zfs-csi does not have, or an operator command (ctl, doctor and the reports) given a flag, value or argument it does not take. The message says what, and -h lists the flags."},
		{fmt.Sprint(envflag.ExitConfig), "A setting does not parse or make sense (the message names it): the unit does not restart the daemon for it."},
	} {
		fmt.Fprintf(out, ".TP\n.B %s\n%s\n", status[0], roffEscape(status[1]))
	}

	fmt.Fprintln(out, ".SH EXAMPLES")
	for _, example := range manExamples {
		fmt.Fprintf(out, ".TP\n.B %s\n%s.\n", roffEscape(example[0]), roffEscape(upperFirst(example[1])))
	}
	fmt.Fprint(out, manFooter)
}

// writeManOptions writes the options of command ("" for the daemon) and
// adds to environment, by variable, the lines that say what it sets.
func writeManOptions(out io.Writer, command string, environment map[string][]string) {
	for _, s := range unitSettings(command) {
		argument := ""
		if !s.boolean {
			argument = " " + `\fI` + "value" + `\fR`
		}
		fmt.Fprintf(out, ".TP\n.BR \\-\\-%s%s\n%s", roffEscape(s.flag), argument, roffEscape(upperFirst(s.meaning)))
		if s.defaultValue != "" && s.defaultValue != "false" {
			fmt.Fprintf(out, " (default: %s)", roffEscape(s.defaultValue))
		}
		fmt.Fprintln(out, ".")
		if s.allowed != "" {
			fmt.Fprintf(out, "Allowed: %s.\n", roffEscape(s.allowed))
		}
		if s.variable != "" {
			sets := "Sets\n.BR \\-\\-" + roffEscape(s.flag)
			if command != "" {
				sets += " \" of " + command + "\""
			}
			environment[s.variable] = append(environment[s.variable], sets+" .")
		}
	}
}

func upperFirst(text string) string {
	if text == "" {
		return text
	}
	return strings.ToUpper(text[:1]) + text[1:]
}
