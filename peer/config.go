package peer

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"
)

// Config is the channel's configuration. The zero value is off.
type Config struct {
	// NodeID is this daemon's node ID: what its own certificate must name.
	NodeID string
	// Listen is the TCP address the channel is served at ("" serves
	// nothing: this node can still pull from others).
	Listen string
	// CertFile and KeyFile are this daemon's certificate (with any
	// intermediates) and key, PEM; CAFile the CA certificates (PEM) peers'
	// certificates must chain to. All three are read at every handshake.
	CertFile, KeyFile, CAFile string
	// Peers are other nodes' addresses (host:port), by node ID; tried in
	// order.
	Peers map[string][]string
	// AddressTemplate is the address of a node Peers does not list, with
	// "{node}" standing for its node ID ("{node}.storage.example:7443").
	AddressTemplate string
	// MaxStreams bounds the snapshot streams this daemon serves at once, to
	// all peers together; a peer beyond it gets RESOURCE_EXHAUSTED.
	// 0 means DefaultMaxStreams.
	MaxStreams int
}

// DefaultMaxStreams is Config.MaxStreams' default: sends are disk- and
// network-bound, and a few at once already fill both.
const DefaultMaxStreams = 4

// NodePlaceholder stands for a node ID in Config.AddressTemplate.
const NodePlaceholder = "{node}"

// ErrNotConfigured is what Dial answers when the channel is off or no
// address is known for a node.
var ErrNotConfigured = errors.New("transfers between nodes are not configured")

// Enabled reports whether the channel is configured: credentials given.
// Without them the daemon neither serves nor dials.
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

// nodeIDPattern is driver's rule for node IDs (rules.Config.Validate),
// repeated here only to check what a certificate says before it is used as
// one; a node ID driver accepts always matches it.
var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// Validate reports the first configuration error, worded for an operator.
// It does not read the files (Load does, and the daemon calls it at start).
func (c Config) Validate() error {
	if !c.Enabled() {
		if c.Listen != "" || len(c.Peers) > 0 || c.AddressTemplate != "" {
			return errors.New("the peer channel needs a certificate, its key and the CA (--peer-cert, --peer-key, --peer-ca)")
		}
		return nil
	}
	if c.CertFile == "" || c.KeyFile == "" || c.CAFile == "" {
		return errors.New("the peer channel needs all of --peer-cert, --peer-key and --peer-ca")
	}
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return fmt.Errorf("peer listen address %q: %v", c.Listen, err)
		}
	}
	for nodeID, addresses := range c.Peers {
		if !nodeIDPattern.MatchString(nodeID) {
			return fmt.Errorf("peer %q is not a node ID", nodeID)
		}
		for _, address := range addresses {
			if _, _, err := net.SplitHostPort(address); err != nil {
				return fmt.Errorf("peer %s's address %q: %v", nodeID, address, err)
			}
		}
	}
	if c.AddressTemplate != "" {
		if !strings.Contains(c.AddressTemplate, NodePlaceholder) {
			return fmt.Errorf("peer address template %q does not contain %s", c.AddressTemplate, NodePlaceholder)
		}
		if _, _, err := net.SplitHostPort(strings.ReplaceAll(c.AddressTemplate, NodePlaceholder, "node")); err != nil {
			return fmt.Errorf("peer address template %q: %v", c.AddressTemplate, err)
		}
	}
	if c.MaxStreams < 0 {
		return errors.New("the peer stream limit must not be negative")
	}
	return nil
}

// Addresses are where nodeID's daemon is reached, in the order to try.
func (c Config) Addresses(nodeID string) ([]string, error) {
	if !c.Enabled() {
		return nil, ErrNotConfigured
	}
	if !nodeIDPattern.MatchString(nodeID) {
		return nil, fmt.Errorf("%q is not a node ID", nodeID)
	}
	if addresses := c.Peers[nodeID]; len(addresses) > 0 {
		return addresses, nil
	}
	if c.AddressTemplate != "" {
		return []string{strings.ReplaceAll(c.AddressTemplate, NodePlaceholder, nodeID)}, nil
	}
	return nil, fmt.Errorf("%w: no address for node %q (--peer gives one, --peer-address-template all)", ErrNotConfigured, nodeID)
}

// ParsePeer reads "NODE=HOST:PORT", the form of one --peer flag.
func ParsePeer(value string) (nodeID string, addresses []string, err error) {
	nodeID, address, found := strings.Cut(strings.TrimSpace(value), "=")
	if !found || nodeID == "" || address == "" {
		return "", nil, fmt.Errorf("peer %q is not NODE=HOST:PORT", value)
	}
	return nodeID, []string{address}, nil
}

// peerNames lists the configured peers, sorted, for logs.
func (c Config) peerNames() []string {
	names := make([]string, 0, len(c.Peers))
	for name := range c.Peers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
