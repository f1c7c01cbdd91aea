// Package envflag holds what several commands read from their flags and the
// environment: every flag can also be set by the environment variable named
// in its usage text (the unit's environment file sets them for the daemon,
// and an operator who sources the same file gets the same selection in the
// operator commands).
package envflag

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/zfs-csi/zfs-csi/driver"
)

// String is the environment variable name, or fallback when it is unset: a
// flag's default.
func String(name, fallback string) string {
	if value, ok := os.LookupEnv(name); ok {
		return value
	}
	return fallback
}

// Int is the environment variable name as an integer, or fallback when it
// is unset or unparsable.
func Int(name string, fallback int64) int64 {
	if value, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil {
		return value
	}
	return fallback
}

// Duration is the environment variable name as a duration (1m30s), or
// fallback when it is unset or unparsable.
func Duration(name string, fallback time.Duration) time.Duration {
	if value, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return value
	}
	return fallback
}

// Bool reads a boolean environment variable the way flag.BoolVar parses
// its argument; unset or unparsable means fallback.
func Bool(name string, fallback bool) bool {
	if value, err := strconv.ParseBool(os.Getenv(name)); err == nil {
		return value
	}
	return fallback
}

// List is a repeatable flag; from the environment it is comma-separated.
type List []string

func (l *List) String() string { return strings.Join(*l, ",") }

func (l *List) Set(value string) error {
	*l = append(*l, value)
	return nil
}

// DriverConfig registers the flags that say which datasets are the
// driver's, shared by the daemon and the operator commands; finish, after
// parsing, sets every flag the command line left alone from source (Apply)
// and validates cfg, saying where the settings were read when one is wrong.
func DriverConfig(flags *flag.FlagSet, cfg *driver.Config) (finish func(source Source) error) {
	hostname, _ := os.Hostname()
	parents := &List{}
	flags.StringVar(&cfg.DriverName, "driver-name", "zfs.csi.dev", "CSI driver name [ZFS_CSI_DRIVER_NAME]")
	flags.StringVar(&cfg.NodeID, "node-id", hostname, "this node's ID (default: the hostname) [ZFS_CSI_NODE_ID]")
	flags.Var(parents, "parent-dataset", "dataset volumes are created under; repeat for several, the first is the default [ZFS_CSI_PARENT_DATASETS, comma-separated]")
	return func(source Source) error {
		if err := source.Apply(flags); err != nil {
			return err
		}
		cfg.ParentDatasets = *parents
		if err := cfg.Validate(); err != nil {
			return ConfigError{fmt.Errorf("%w (%s)", err, source.Describe())}
		}
		return nil
	}
}

// Endpoint registers --endpoint, the daemon's socket.
func Endpoint(flags *flag.FlagSet, endpoint *string) {
	flags.StringVar(endpoint, "endpoint", String("CSI_ENDPOINT", "unix:///run/zfs-csi/csi.sock"), "CSI unix socket [CSI_ENDPOINT]")
}
