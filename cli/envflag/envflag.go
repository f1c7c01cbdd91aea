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
	"strings"

	"github.com/zfs-csi/zfs-csi/rules"
)

// List is a repeatable flag; from the environment it is comma-separated.
type List []string

func (l *List) String() string { return strings.Join(*l, ",") }

// Get is the items, for a Rule's test.
func (l *List) Get() any { return []string(*l) }

func (l *List) Set(value string) error {
	*l = append(*l, value)
	return nil
}

// DriverConfig registers the flags that say which datasets are the
// driver's, shared by the daemon and the operator commands; finish, after
// parsing, sets every flag the command line left alone from source (Apply)
// and validates cfg, saying where the settings were read when one is wrong.
func DriverConfig(flags *flag.FlagSet, cfg *rules.Config) (finish func(source Source) error) {
	flagRules, complete := DeclareDriverConfig(flags, cfg)
	return func(source Source) error {
		if err := source.apply(flags, flagRules); err != nil {
			return err
		}
		if err := source.check(flags, flagRules); err != nil {
			return err
		}
		return complete(source)
	}
}

// DeclareDriverConfig registers DriverConfig's flags and gives their rules;
// complete, once they were parsed and checked, fills cfg and checks what
// the settings must be together (IDs that fit in 128 bytes).
func DeclareDriverConfig(flags *flag.FlagSet, cfg *rules.Config) (flagRules []Rule, complete func(source Source) error) {
	hostname, _ := os.Hostname()
	parents := &List{}
	flags.StringVar(&cfg.DriverName, "driver-name", "zfs.csi.dev", "CSI driver name [ZFS_CSI_DRIVER_NAME]")
	flags.StringVar(&cfg.NodeID, "node-id", hostname, "this node's ID, unique in the cluster: the first part of every volume ID and the value of the topology key <driver-name>/node; after a change only unpublish and unstage still serve the volumes made before [ZFS_CSI_NODE_ID]")
	flags.Var(parents, "parent-dataset", "dataset volumes are created under, which must exist; repeat for several, the first is the default [ZFS_CSI_PARENT_DATASETS, comma-separated]")
	flagRules = []Rule{
		{Flag: "driver-name", Check: DriverName},
		{Flag: "node-id", Check: Check{Allowed: "1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit", Test: func(value any) error {
			return refused(validField(func(c *rules.Config) { c.NodeID = value.(string) }))
		}}},
		{Flag: "parent-dataset", Check: Check{Allowed: "one or more parent dataset names (pool/path), none twice", Test: func(value any) error {
			if len(value.([]string)) == 0 {
				return ErrNotAllowed
			}
			return validField(func(c *rules.Config) { c.ParentDatasets = value.([]string) })
		}}},
	}
	return flagRules, func(source Source) error {
		cfg.ParentDatasets = *parents
		if err := cfg.Validate(); err != nil {
			return ConfigError{Err: fmt.Errorf("%w (%s)", err, source.Describe())}
		}
		return nil
	}
}

// DriverName is a CSI driver name the daemon can have.
var DriverName = Check{Allowed: "a lower-case domain name of at most 63 characters", Test: func(value any) error {
	return refused(validField(func(c *rules.Config) { c.DriverName = value.(string) }))
}}

// validField checks one field of rules.Config by its own Validate, the
// other fields set to values it allows.
func validField(set func(*rules.Config)) error {
	cfg := rules.Config{DriverName: "zfs.csi.dev", NodeID: "node", ParentDatasets: []string{"pool/csi"}}
	set(&cfg)
	return cfg.Validate()
}

// refused is ErrNotAllowed for an error that says no more than the rule.
func refused(err error) error {
	if err != nil {
		return ErrNotAllowed
	}
	return nil
}

// Endpoint registers --endpoint, the daemon's socket.
func Endpoint(flags *flag.FlagSet, endpoint *string) {
	flags.StringVar(endpoint, "endpoint", "unix:///run/zfs-csi/csi.sock", "the daemon's CSI unix socket (mode 0600; a stale one is removed) [CSI_ENDPOINT]")
}
