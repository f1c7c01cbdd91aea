package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/zfs-csi/zfs-csi/cli/daemon"
	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/cli/nomadbridge"
)

// setting is one flag of a unit's command as its documents show it: the
// flag, the variable that sets it too, its default, what its rule allows
// and what it does. The manual page and docs/configuration.md are written
// from these, so that they say what the binary takes.
type setting struct {
	flag, variable string
	list           bool // the variable is comma-separated, the flag repeated
	boolean        bool
	defaultValue   string // "" when the flag has none
	computed       bool   // defaultValue is said in words: the daemon computes it where it runs
	allowed        string
	meaning        string
}

// unitSettings are the settings of the commands systemd runs: the daemon's
// (command "") and the Nomad bridge's, sorted by flag.
func unitSettings(command string) []setting {
	flags, rules := daemon.Rules()
	if command == "nomad-bridge" {
		flags, rules = nomadbridge.Flags()
	}
	return describeSettings(flags, rules)
}

func describeSettings(flags *flag.FlagSet, rules []envflag.Rule) []setting {
	hostname, _ := os.Hostname()
	var settings []setting
	flags.VisitAll(func(f *flag.Flag) {
		meaning, variable, list := envflag.UsageVariable(f.Usage)
		s := setting{flag: f.Name, variable: variable, list: list, meaning: meaning, defaultValue: f.DefValue}
		_, s.boolean = f.Value.(interface{ IsBoolFlag() bool })
		switch {
		case f.DefValue == "[]", f.DefValue == "":
			s.defaultValue = ""
		case f.DefValue == hostname && hostname != "":
			s.defaultValue, s.computed = "the host name", true
		}
		for _, rule := range rules {
			if rule.Flag == f.Name {
				s.allowed = rule.Allowed
			}
		}
		settings = append(settings, s)
	})
	return settings
}

// operatorVariables are the variables only the operator commands read from
// the configuration file, with what each says (TestEveryVariableIsKnown).
var operatorVariables = [][2]string{
	{"ZFS_CSI_CONFIG", "the configuration file the operator commands read, instead of /etc/default/zfs-csi or /etc/sysconfig/zfs-csi"},
	{"ZFS_CSI_CO_DIRS", "doctor's --co-dir, comma-separated: look for mounts left behind only below these directories"},
}

func operatorVariableNames() []string {
	var names []string
	for _, variable := range operatorVariables {
		names = append(names, variable[0])
	}
	return names
}

// markdownCell makes text safe in a cell of a markdown table.
func markdownCell(text string) string {
	return strings.ReplaceAll(text, "|", `\|`)
}

// writeSettingsTable writes settings as docs/configuration.md's table.
func writeSettingsTable(out io.Writer, settings []setting) {
	fmt.Fprintln(out, "| flag | environment | default | allowed | meaning |")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	for _, s := range settings {
		variable := "—"
		if s.variable != "" {
			variable = "`" + s.variable + "`"
			if s.list {
				variable += " (comma-separated)"
			}
		}
		defaultValue := "—"
		switch {
		case s.computed:
			defaultValue = s.defaultValue
		case s.defaultValue != "":
			defaultValue = "`" + s.defaultValue + "`"
		}
		fmt.Fprintf(out, "| `--%s` | %s | %s | %s | %s |\n", s.flag, variable, defaultValue,
			markdownCell(s.allowed), markdownCell(s.meaning))
	}
}

// unitCommands are the commands systemd runs, as unitSettings names them
// ("" for the daemon).
var unitCommands = []string{"", "nomad-bridge"}

// tableMarkers are the lines around command's generated table in
// docs/configuration.md.
func tableMarkers(command string) (begin, end string) {
	if command == "" {
		command = "zfs-csi"
	}
	return "<!-- " + command + " settings: written by go test ./cli -run ConfigurationPage -update -->\n",
		"<!-- end of " + command + " settings -->\n"
}

// withSettingsTables gives page with every generated table replaced by
// what the flag sets say now; a page without a table's markers is an error.
func withSettingsTables(page string) (string, error) {
	for _, command := range unitCommands {
		begin, end := tableMarkers(command)
		before, rest, ok := strings.Cut(page, begin)
		_, after, ok2 := strings.Cut(rest, end)
		if !ok || !ok2 {
			return "", fmt.Errorf("no %q … %q markers", strings.TrimSpace(begin), strings.TrimSpace(end))
		}
		var table strings.Builder
		writeSettingsTable(&table, unitSettings(command))
		page = before + begin + table.String() + end + after
	}
	return page, nil
}
