package daemon

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/peer"
)

// declarePeerFlags declares the peer channel's flags (decision 14) into
// cfg, and their rules; complete, after parsing, fills in cfg and checks
// what the settings must be together (all three files or none). The
// channel is off unless the certificate, its key and the CA are given.
func declarePeerFlags(flags *flag.FlagSet, cfg *peer.Config) (rules []envflag.Rule, complete func(nodeID string) error) {
	flags.StringVar(&cfg.Listen, "peer-listen", "", "serve this node's snapshots to peer daemons at ADDRESS (host:port), mutual TLS only; off when empty [ZFS_CSI_PEER_LISTEN]")
	flags.StringVar(&cfg.CertFile, "peer-cert", "", "PEM certificate this daemon presents to peers; it must carry the URI SAN "+peer.NodeURIPrefix+"<node ID>; read at every handshake [ZFS_CSI_PEER_CERT]")
	flags.StringVar(&cfg.KeyFile, "peer-key", "", "PEM key of --peer-cert [ZFS_CSI_PEER_KEY]")
	flags.StringVar(&cfg.CAFile, "peer-ca", "", "PEM CA certificates that peers' certificates must chain to [ZFS_CSI_PEER_CA]")
	peers := &envflag.List{}
	flags.Var(peers, "peer", "NODE=HOST:PORT, where node NODE's daemon serves peers; repeat for several nodes or addresses [ZFS_CSI_PEERS, comma-separated]")
	flags.StringVar(&cfg.AddressTemplate, "peer-address-template", "", "address of a node --peer does not name, "+peer.NodePlaceholder+" standing for its node ID, e.g. "+peer.NodePlaceholder+".storage.example:7443 [ZFS_CSI_PEER_ADDRESS_TEMPLATE]")
	flags.IntVar(&cfg.MaxStreams, "peer-max-streams", peer.DefaultMaxStreams, "snapshot streams served to peers at once; more wait their turn briefly, then are refused [ZFS_CSI_PEER_MAX_STREAMS]")
	peerAddress := envflag.Check{Allowed: "NODE=HOST:PORT with a port number", Test: func(value any) error {
		_, addresses, err := peer.ParsePeer(value.(string))
		for _, address := range addresses {
			err = errors.Join(err, envflag.CheckHostPort(address))
		}
		return err
	}}
	template := envflag.Check{Allowed: "HOST:PORT with " + peer.NodePlaceholder + " in HOST and a port number", Test: func(value any) error {
		if !strings.Contains(value.(string), peer.NodePlaceholder) {
			return errors.New("no " + peer.NodePlaceholder)
		}
		return envflag.CheckHostPort(strings.ReplaceAll(value.(string), peer.NodePlaceholder, "node"))
	}}
	// Read at every handshake, so that a renewed certificate needs no
	// restart; a file missing at start is a mistyped path.
	pemFile := envflag.Optional(envflag.File, "no peer channel (--peer-cert, --peer-key and --peer-ca: all or none)")
	rules = []envflag.Rule{
		{Flag: "peer-listen", Check: envflag.Optional(envflag.HostPort, "serving nothing to peers")},
		{Flag: "peer-cert", Check: pemFile},
		{Flag: "peer-key", Check: pemFile},
		{Flag: "peer-ca", Check: pemFile},
		{Flag: "peer", Check: envflag.Each(peerAddress)},
		{Flag: "peer-address-template", Check: envflag.Optional(template, "none")},
		{Flag: "peer-max-streams", Check: envflag.AtLeast(1)},
	}
	return rules, func(nodeID string) error {
		cfg.NodeID = nodeID
		for _, value := range *peers {
			node, addresses, err := peer.ParsePeer(value)
			if err != nil {
				return err
			}
			if cfg.Peers == nil {
				cfg.Peers = map[string][]string{}
			}
			cfg.Peers[node] = append(cfg.Peers[node], addresses...)
		}
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("%s", strings.TrimSpace(err.Error()))
		}
		return nil
	}
}
