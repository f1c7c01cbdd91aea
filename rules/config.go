package rules

import (
	"fmt"
	"regexp"
	"strings"
)

// Config is what the services share about this driver instance.
type Config struct {
	// DriverName is the CSI plugin name, e.g. "zfs.csi.dev".
	DriverName string
	// Version is stamped at build time.
	Version string
	// NodeID names this host; it is the first part of every ID the driver issues.
	NodeID string
	// ParentDatasets are the datasets volumes may live under; the first is the default.
	ParentDatasets []string
	// AllowedPoolProperties are the ZFS properties that spend the whole
	// pool's resources (dedup, copies, …) which volumes may nevertheless set:
	// the operator's choice, never a caller's (the controller's
	// poolProperties lists them and refuses the rest).
	AllowedPoolProperties []string
	// AllowMoves lets volumes move between this node and others: the
	// operator's choice on each node (decision 15). A move needs it on the
	// node the volume moves to, where the operator starts it, and on the
	// node it leaves, which deletes it only then. No CSI parameter can.
	AllowMoves bool
}

// driverNamePattern is the CSI plugin-name rule (a domain name, ≤ 63 bytes),
// narrowed to lower case because the name also prefixes ZFS user properties.
var driverNamePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// nodeIDPattern keeps node IDs usable as the host part of "host:dataset" IDs
// and as a Kubernetes label value (the topology segment).
var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// ValidNodeID reports whether nodeID could name a node of this driver.
func ValidNodeID(nodeID string) bool { return nodeIDPattern.MatchString(nodeID) }

// Validate reports the first configuration error, worded for an operator.
func (c Config) Validate() error {
	if !driverNamePattern.MatchString(c.DriverName) {
		return fmt.Errorf("driver name %q is not a lower-case domain name of at most 63 characters", c.DriverName)
	}
	if !nodeIDPattern.MatchString(c.NodeID) {
		return fmt.Errorf("node ID %q must be 1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit", c.NodeID)
	}
	if len(c.ParentDatasets) == 0 {
		return fmt.Errorf("at least one parent dataset is required")
	}
	seen := map[string]bool{}
	for _, parent := range c.ParentDatasets {
		if parent == "" || strings.ContainsAny(parent, "@# \t\n") || strings.HasPrefix(parent, "/") || strings.HasSuffix(parent, "/") {
			return fmt.Errorf("parent dataset %q is not a dataset name (pool/path, no snapshot)", parent)
		}
		if seen[parent] {
			return fmt.Errorf("parent dataset %q is given twice", parent)
		}
		seen[parent] = true
	}
	if _, err := NewNamer(c); err != nil {
		return err
	}
	return nil
}

// DefaultKubeletDir is kubelet's default --root-dir.
const DefaultKubeletDir = "/var/lib/kubelet"

// TopologyKey is the topology segment key naming this driver's nodes.
func (c Config) TopologyKey() string { return c.DriverName + "/node" }

// Topology is this node's accessible topology.
func (c Config) Topology() map[string]string { return map[string]string{c.TopologyKey(): c.NodeID} }

// IsParent reports whether dataset is one of the allowed parent datasets.
func (c Config) IsParent(dataset string) bool {
	for _, parent := range c.ParentDatasets {
		if parent == dataset {
			return true
		}
	}
	return false
}

// OwnedDataset reports whether dataset is a direct child of an allowed parent:
// the only place a volume of this driver can live.
func (c Config) OwnedDataset(dataset string) bool {
	slash := strings.LastIndexByte(dataset, '/')
	return slash > 0 && !strings.ContainsAny(dataset, "@") && c.IsParent(dataset[:slash]) && dataset[slash+1:] != ""
}
