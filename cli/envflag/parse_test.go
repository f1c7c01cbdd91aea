package envflag

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// parseTestFlags is a flag set with its rules, as a command declares them.
func parseTestFlags() (*flag.FlagSet, []Rule) {
	flags := flag.NewFlagSet("test", flag.ContinueOnError)
	flags.Duration("reap-interval", time.Minute, "how often [ZFS_CSI_REAP_INTERVAL]")
	flags.String("kubelet-dir", "/nonexistent/kubelet", "kubelet's [ZFS_CSI_KUBELET_DIR]")
	return flags, []Rule{{Flag: "reap-interval", Check: PositiveDuration}, {Flag: "kubelet-dir", Check: Directory}}
}

func TestARefusalIsOneLineNamingWhereTheValueWasSet(t *testing.T) {
	file := filepath.Join(t.TempDir(), "zfs-csi")
	if err := os.WriteFile(file, []byte("# settings\nZFS_CSI_REAP_INTERVAL=0s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile, err := EnvironmentAndFile(file)
	if err != nil {
		t.Fatal(err)
	}
	environment := Source{lookup: func(name string) (string, bool) {
		return map[string]string{"ZFS_CSI_REAP_INTERVAL": "0s"}[name], name == "ZFS_CSI_REAP_INTERVAL"
	}}
	withUnitFile := environment
	withUnitFile.units = []string{file}
	tests := []struct {
		name   string
		args   []string
		source Source
		want   string
	}{
		{"the command line", []string{"--reap-interval=0s"}, Source{},
			`flag --reap-interval "0s": must be a duration above zero, such as 30s or 5m`},
		{"a variable", nil, environment,
			`variable ZFS_CSI_REAP_INTERVAL "0s" (--reap-interval): must be a duration above zero, such as 30s or 5m`},
		{"a variable a unit's file sets", nil, withUnitFile,
			`variable ZFS_CSI_REAP_INTERVAL "0s" (` + file + `:2, --reap-interval): must be`},
		{"the configuration file", nil, fromFile,
			file + `:2: ZFS_CSI_REAP_INTERVAL "0s" (--reap-interval): must be`},
		{"a default", []string{"--reap-interval=1s"}, Source{},
			`--kubelet-dir (ZFS_CSI_KUBELET_DIR) is not set, its default "/nonexistent/kubelet": stat /nonexistent/kubelet: no such file or directory; must be an existing directory`},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			flags, rules := parseTestFlags()
			err := Parse(flags, test.args, test.source, rules, io.Discard)
			if !errors.As(err, new(ConfigError)) || !strings.HasPrefix(err.Error(), test.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got %v\nwant one line starting %s", err, test.want)
			}
			if fromCommandLine := errors.As(err, new(UsageError)); fromCommandLine != (test.args != nil && test.name == "the command line") {
				t.Errorf("a UsageError: %v; want one for the command line only", fromCommandLine)
			}
		})
	}
}

func TestAnUnknownVariableNamesTheNearestKnownOne(t *testing.T) {
	source := Source{environ: func() []string {
		return []string{"PATH=/bin", "ZFS_CSI_E2E_POOL=tank", "ZFS_CSI_LOG_LEVEL=debug", "ZFS_CSI_METRICS_ADRESS=9820"}
	}, lookup: func(string) (string, bool) { return "9820", true }}
	known := []string{"ZFS_CSI_LOG_LEVEL", "ZFS_CSI_METRICS_ADDRESS", "ZFS_CSI_METRICS_WEB_CONFIG"}
	err := source.Unknown("ZFS_CSI_", known, []string{"ZFS_CSI_E2E_"})
	if !errors.As(err, new(ConfigError)) || err.Error() != "variable ZFS_CSI_METRICS_ADRESS is not a setting of zfs-csi; did you mean ZFS_CSI_METRICS_ADDRESS?" {
		t.Errorf("got %v", err)
	}
	if nearest := Nearest("ZFS_CSI_FROBNICATE", known); nearest != "" {
		t.Errorf("Nearest suggests %s for a name near none", nearest)
	}
}
