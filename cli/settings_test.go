package cli

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/zfs-csi/zfs-csi/cli/daemon"
	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/cli/nomadbridge"
)

// badSetting is a value a setting's rule refuses, and what else must be set
// for the rule to apply.
type badSetting struct {
	command string // "" for the daemon
	flag    string
	value   string
	with    map[string]string // variables set beside it
}

// badSettings feeds every setting of the daemon and the bridge a value its
// rule refuses; TestEveryBadSettingStopsTheCommand holds it complete.
func badSettings(t *testing.T) []badSetting {
	dir := t.TempDir()
	return []badSetting{
		{flag: "parent-dataset", value: "tank/csi@snapshot"},
		{flag: "driver-name", value: "Not_A_Domain"},
		{flag: "node-id", value: "not a node id"},
		{flag: "endpoint", value: "tcp://127.0.0.1:10000"},
		{flag: "log-level", value: "loud"},
		{flag: "log-format", value: "xml"},
		{flag: "metrics-address", value: "notaport"},
		{flag: "metrics-web-config", value: filepath.Join(dir, "missing.yml"), with: map[string]string{"ZFS_CSI_METRICS_ADDRESS": "127.0.0.1:0"}},
		{flag: "reap-interval", value: "0s"},
		{flag: "allow-pool-properties", value: "dedupe"},
		{flag: "max-volumes-per-node", value: "-1"},
		{flag: "device-timeout", value: "0"},
		{flag: "kubernetes", value: "yes"},
		{flag: "kubelet-dir", value: filepath.Join(dir, "nonexistent", "kubelet"), with: map[string]string{"ZFS_CSI_KUBERNETES": "true"}},
		{flag: "nomad-data-dir", value: "relative/nomad"},
		{flag: "allow-paths", value: "/"},
		{flag: "stop-timeout", value: "-5s"},
		{flag: "peer-listen", value: "0.0.0.0"},
		{flag: "peer-cert", value: filepath.Join(dir, "missing.pem")},
		{flag: "peer-key", value: filepath.Join(dir, "missing.key")},
		{flag: "peer-ca", value: filepath.Join(dir, "missing-ca.pem")},
		{flag: "peer", value: "node-b=storage.example:https"},
		{flag: "peer-address-template", value: "storage.example:7443"},
		{flag: "peer-max-streams", value: "-1"},
		{flag: "allow-moves", value: "maybe"},
		{flag: "operator-socket", value: "tcp://127.0.0.1:1"},

		{command: "nomad-bridge", flag: "nomad-data-dir", value: "relative/nomad"},
		{command: "nomad-bridge", flag: "nomad-namespace", value: ""},
		{command: "nomad-bridge", flag: "nomad-job", value: ""},
		{command: "nomad-bridge", flag: "driver-name", value: "Not_A_Domain"},
		{command: "nomad-bridge", flag: "endpoint", value: "tcp://127.0.0.1:10000"},
		{command: "nomad-bridge", flag: "nomad-addr", value: "127.0.0.1:4646"},
		{command: "nomad-bridge", flag: "nomad-token-file", value: "nomad-token"},
		{command: "nomad-bridge", flag: "nomad-cacert", value: filepath.Join(dir, "missing-ca.pem")},
		{command: "nomad-bridge", flag: "nomad-client-cert", value: filepath.Join(dir, "missing.pem")},
		{command: "nomad-bridge", flag: "nomad-client-key", value: filepath.Join(dir, "missing.key")},
		{command: "nomad-bridge", flag: "log-level", value: "loud"},
	}
}

// settingsOf are a command's flags and their rules.
func settingsOf(command string) (*flag.FlagSet, []envflag.Rule) {
	if command == "nomad-bridge" {
		return nomadbridge.Flags()
	}
	return daemon.Rules()
}

// withoutSettings clears the test's environment of the variables the
// commands read, and sets the daemon's required ones.
func withoutSettings(t *testing.T) {
	t.Helper()
	for _, entry := range os.Environ() {
		if name, _, _ := strings.Cut(entry, "="); strings.HasPrefix(name, "ZFS_CSI_") || strings.HasPrefix(name, "NOMAD_") || name == "CSI_ENDPOINT" {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	t.Setenv("ZFS_CSI_CONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("ZFS_CSI_PARENT_DATASETS", "tank/csi")
	t.Setenv("ZFS_CSI_NODE_ID", "node-1")
}

// runMain runs zfs-csi in-process and returns its exit status and the lines
// it wrote to stderr.
func runMain(args ...string) (int, []string) {
	var stderr bytes.Buffer
	status := Main("test", args, io.Discard, &stderr)
	return status, strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
}

func TestEveryBadSettingStopsTheCommand(t *testing.T) {
	for _, bad := range badSettings(t) {
		command := "zfs-csi"
		if bad.command != "" {
			command += " " + bad.command
		}
		flags, _ := settingsOf(bad.command)
		_, variable, _ := envflag.UsageVariable(flags.Lookup(bad.flag).Usage)
		t.Run(fmt.Sprintf("%s with %s=%q exits 78 saying so in one line", command, variable, bad.value), func(t *testing.T) {
			withoutSettings(t)
			for name, value := range bad.with {
				t.Setenv(name, value)
			}
			t.Setenv(variable, bad.value)
			status, lines := runMain(slices.DeleteFunc([]string{bad.command}, func(s string) bool { return s == "" })...)
			if status != envflag.ExitConfig || len(lines) != 1 || !strings.Contains(lines[0], "variable "+variable) ||
				!strings.Contains(lines[0], "--"+bad.flag) || !strings.HasPrefix(lines[0], command+": ") {
				t.Errorf("exit %d, stderr %q; want 78 and one line naming variable %s and --%s", status, lines, variable, bad.flag)
			}
		})
		t.Run(fmt.Sprintf("%s --%s=%q exits 78 saying so and pointing to -h", command, bad.flag, bad.value), func(t *testing.T) {
			withoutSettings(t)
			for name, value := range bad.with {
				t.Setenv(name, value)
			}
			args := slices.DeleteFunc([]string{bad.command, "--" + bad.flag + "=" + bad.value}, func(s string) bool { return s == "" })
			status, lines := runMain(args...)
			if status != envflag.ExitConfig || len(lines) != 2 || !strings.Contains(lines[0], "flag --"+bad.flag) || lines[1] != command+" -h lists the flags" {
				t.Errorf("exit %d, stderr %q; want 78, one line naming flag --%s and one pointing to -h", status, lines, bad.flag)
			}
		})
	}
	t.Run("every setting of the daemon and the bridge is fed a bad value", func(t *testing.T) {
		for _, command := range []string{"", "nomad-bridge"} {
			flags, _ := settingsOf(command)
			flags.VisitAll(func(f *flag.Flag) {
				if !slices.ContainsFunc(badSettings(t), func(bad badSetting) bool { return bad.command == command && bad.flag == f.Name }) {
					t.Errorf("zfs-csi %s --%s: no bad value in badSettings", command, f.Name)
				}
			})
		}
	})
}

func TestEveryFlagHasARule(t *testing.T) {
	for _, command := range []string{"", "nomad-bridge"} {
		flags, rules := settingsOf(command)
		var names []string
		for _, rule := range rules {
			if flags.Lookup(rule.Flag) == nil || slices.Contains(names, rule.Flag) {
				t.Errorf("zfs-csi %s: the rule for --%s names no flag, or a flag a rule names already", command, rule.Flag)
			}
			names = append(names, rule.Flag)
		}
		flags.VisitAll(func(f *flag.Flag) {
			if !slices.Contains(names, f.Name) {
				t.Errorf("zfs-csi %s --%s has no rule: add one to the table beside the flags", command, f.Name)
			}
		})
	}
}

func TestAValueFromTheConfigurationFileIsTracedToItsLine(t *testing.T) {
	withoutSettings(t)
	file := configFile(t, "# the daemon's settings\nZFS_CSI_PARENT_DATASETS=tank/csi\nZFS_CSI_REAP_INTERVAL=0s\n")
	// systemd's EnvironmentFile= puts the file into the daemon's environment.
	t.Setenv("ZFS_CSI_REAP_INTERVAL", "0s")
	status, lines := runMain()
	if status != envflag.ExitConfig || len(lines) != 1 || !strings.Contains(lines[0], file+":3") {
		t.Errorf("exit %d, stderr %q; want 78 and one line naming %s:3", status, lines, file)
	}
}

func TestAnUnknownVariableIsRefusedWithTheNearestName(t *testing.T) {
	for _, command := range []string{"", "nomad-bridge"} {
		t.Run("zfs-csi "+command, func(t *testing.T) {
			withoutSettings(t)
			t.Setenv("ZFS_CSI_METRICS_ADRESS", "9820")
			status, lines := runMain(slices.DeleteFunc([]string{command}, func(s string) bool { return s == "" })...)
			if status != envflag.ExitConfig || len(lines) != 1 || !strings.Contains(lines[0], "variable ZFS_CSI_METRICS_ADRESS") ||
				!strings.Contains(lines[0], "did you mean ZFS_CSI_METRICS_ADDRESS?") {
				t.Errorf("exit %d, stderr %q; want 78 and one line suggesting ZFS_CSI_METRICS_ADDRESS", status, lines)
			}
		})
	}
	t.Run("the test harness's variables are not settings and pass", func(t *testing.T) {
		withoutSettings(t)
		t.Setenv("ZFS_CSI_E2E_POOL", "tank")
		t.Setenv("ZFS_CSI_BINARY", "/share/zfs-csi")
		t.Setenv("ZFS_CSI_REAP_INTERVAL", "0s") // stops the daemon before it starts
		if status, lines := runMain(); status != envflag.ExitConfig || !strings.Contains(lines[0], "ZFS_CSI_REAP_INTERVAL") {
			t.Errorf("exit %d, stderr %q; want the refusal of ZFS_CSI_REAP_INTERVAL alone", status, lines)
		}
	})
}

func TestAFlagTheDaemonDoesNotHaveSuggestsTheNearest(t *testing.T) {
	withoutSettings(t)
	status, lines := runMain("--metrics-adress", "9820")
	if status != envflag.ExitConfig || len(lines) != 2 || !strings.Contains(lines[0], "did you mean --metrics-address?") || lines[1] != "zfs-csi -h lists the flags" {
		t.Errorf("exit %d, stderr %q; want 78, the nearest flag and one line pointing to -h", status, lines)
	}
}

func TestEveryVariableIsKnown(t *testing.T) {
	// Each command's -h names the variables its flags read: the operator
	// commands read them from the daemon's configuration file, so the
	// daemon and the bridge must not refuse them.
	bridge, _ := nomadbridge.Flags()
	known := slices.Concat(envflag.FlagVariables(daemon.Flags()), envflag.FlagVariables(bridge), operatorVariableNames())
	variable := regexp.MustCompile(`\[(ZFS_CSI_[A-Z0-9_]+)`)
	for _, command := range commands() {
		if command.run == nil {
			continue
		}
		var help bytes.Buffer
		command.run([]string{"-h"}, &help, &help)
		for _, match := range variable.FindAllStringSubmatch(help.String(), -1) {
			if !slices.Contains(known, match[1]) {
				t.Errorf("zfs-csi %s reads %s, which the daemon and the bridge would refuse: add it to operatorVariables", command.name, match[1])
			}
		}
	}
}

func TestTheConfigurationPageIsWrittenFromTheFlagTables(t *testing.T) {
	const path = "../docs/configuration.md"
	committed, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page, err := withSettingsTables(string(committed))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if *update {
		if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
		committed = []byte(page)
	}
	if string(committed) != page {
		t.Fatalf("%s's settings tables are not what the flag tables say: go test ./cli -run ConfigurationPage -update rewrites them", path)
	}
	// Every flag and variable of both units has its row, with the rule's
	// words: a table that lost one fails here even if regenerated wrongly.
	for _, command := range unitCommands {
		flags, rules := settingsOf(command)
		begin, end := tableMarkers(command)
		_, table, _ := strings.Cut(string(committed), begin)
		table, _, _ = strings.Cut(table, end)
		flags.VisitAll(func(f *flag.Flag) {
			_, variable, _ := envflag.UsageVariable(f.Usage)
			row := regexp.MustCompile("(?m)^\\| `--" + regexp.QuoteMeta(f.Name) + "` \\| `" + regexp.QuoteMeta(variable) + "`[^\\n]*$")
			line := row.FindString(table)
			if line == "" {
				t.Errorf("%s has no row for zfs-csi %s --%s (%s)", path, command, f.Name, variable)
				return
			}
			for _, rule := range rules {
				if rule.Flag == f.Name && !strings.Contains(line, markdownCell(rule.Allowed)) {
					t.Errorf("%s: the row of --%s does not say what is allowed (%q)", path, f.Name, rule.Allowed)
				}
			}
		})
	}
}

func TestTheManualPageNamesEveryVariable(t *testing.T) {
	var page bytes.Buffer
	writeManPage(&page)
	environment := page.String()[strings.Index(page.String(), ".SH ENVIRONMENT"):strings.Index(page.String(), ".SH EXIT STATUS")]
	bridge, _ := nomadbridge.Flags()
	for _, variable := range slices.Concat(envflag.FlagVariables(daemon.Flags()), envflag.FlagVariables(bridge), operatorVariableNames()) {
		if !strings.Contains(environment, ".B "+strings.ReplaceAll(variable, "-", `\-`)+"\n") {
			t.Errorf("the manual page's ENVIRONMENT lacks %s", variable)
		}
	}
	options := page.String()[strings.Index(page.String(), ".SH OPTIONS"):strings.Index(page.String(), ".SH ENVIRONMENT")]
	bridge.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(options[strings.Index(options, ".SS nomad-bridge"):], ".BR \\-\\-"+strings.ReplaceAll(f.Name, "-", `\-`)) {
			t.Errorf("the manual page's nomad-bridge options lack --%s", f.Name)
		}
	})
}
