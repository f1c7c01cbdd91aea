package envflag

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testFlags is a command's flag set as the commands declare theirs: the
// variable each flag can come from at the end of its usage.
func testFlags() (*flag.FlagSet, *bool, *time.Duration, *List, *string) {
	flags := flag.NewFlagSet("test", flag.ContinueOnError)
	kubernetes := flags.Bool("kubernetes", false, "serve kubelet [ZFS_CSI_KUBERNETES]")
	interval := flags.Duration("reap-interval", time.Minute, "how often [ZFS_CSI_REAP_INTERVAL]")
	parents := &List{}
	flags.Var(parents, "parent-dataset", "parents [ZFS_CSI_PARENT_DATASETS, comma-separated]")
	level := flags.String("log-level", "info", "level [ZFS_CSI_LOG_LEVEL]")
	return flags, kubernetes, interval, parents, level
}

func TestAValueThatDoesNotParseIsAConfigErrorNamingItsVariable(t *testing.T) {
	for variable, value := range map[string]string{"ZFS_CSI_KUBERNETES": "yes", "ZFS_CSI_REAP_INTERVAL": "5"} {
		t.Run(variable+"="+value, func(t *testing.T) {
			t.Setenv(variable, value)
			flags, _, _, _, _ := testFlags()
			err := Environment().Apply(flags)
			if !errors.As(err, new(ConfigError)) || !strings.Contains(err.Error(), variable) || !strings.Contains(err.Error(), "variable "+variable) {
				t.Fatalf("got %v, want a ConfigError naming %s and where it was set", err, variable)
			}
		})
	}
}

func TestTheCommandLineWinsOverTheEnvironmentWhichWinsOverTheFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "zfs-csi")
	contents := "# the daemon's settings\nZFS_CSI_PARENT_DATASETS=\"tank/a, tank/b\"\nZFS_CSI_LOG_LEVEL=warn\nZFS_CSI_KUBERNETES=true\n#ZFS_CSI_REAP_INTERVAL=9m\n"
	if err := os.WriteFile(file, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ZFS_CSI_LOG_LEVEL", "debug")
	source, err := EnvironmentAndFile(filepath.Join(t.TempDir(), "missing"), file)
	if err != nil || source.File != file {
		t.Fatalf("source %+v, %v: want the second file, the first missing", source, err)
	}
	flags, kubernetes, interval, parents, level := testFlags()
	if err := flags.Parse([]string{"--kubernetes=false"}); err != nil {
		t.Fatal(err)
	}
	if err := source.Apply(flags); err != nil {
		t.Fatal(err)
	}
	if *kubernetes || *level != "debug" || *interval != time.Minute || strings.Join(*parents, " ") != "tank/a tank/b" {
		t.Errorf("kubernetes %v (command line: false), log level %q (environment: debug), interval %v (commented out: 1m), parents %q (file)",
			*kubernetes, *level, *interval, *parents)
	}
	if !strings.Contains(source.Describe(), file) {
		t.Errorf("Describe() = %q, want it to name %s", source.Describe(), file)
	}
}

func TestWithoutAFileTheErrorsSayWhereTheyLooked(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "zfs-csi")
	source, err := EnvironmentAndFile(missing)
	if err != nil || source.File != "" || !strings.Contains(source.Describe(), missing) {
		t.Fatalf("source %+v, %v, describes itself as %q", source, err, source.Describe())
	}
}
