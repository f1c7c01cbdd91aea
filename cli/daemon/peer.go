package daemon

import (
	"flag"
	"fmt"
	"strings"

	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/peer"
)

// declarePeerFlags declares the peer channel's flags (issue 38, decision
// 14) into cfg; finish, after parsing, completes and checks it. The channel
// is off unless the certificate, its key and the CA are given.
func declarePeerFlags(flags *flag.FlagSet, cfg *peer.Config) (finish func(nodeID string) error) {
	flags.StringVar(&cfg.Listen, "peer-listen", "", "serve this node's snapshots to peer daemons at ADDRESS (host:port), mutual TLS only; off when empty [ZFS_CSI_PEER_LISTEN]")
	flags.StringVar(&cfg.CertFile, "peer-cert", "", "PEM certificate this daemon presents to peers; it must carry the URI SAN "+peer.NodeURIPrefix+"<node ID>; read at every handshake [ZFS_CSI_PEER_CERT]")
	flags.StringVar(&cfg.KeyFile, "peer-key", "", "PEM key of --peer-cert [ZFS_CSI_PEER_KEY]")
	flags.StringVar(&cfg.CAFile, "peer-ca", "", "PEM CA certificates that peers' certificates must chain to [ZFS_CSI_PEER_CA]")
	peers := &envflag.List{}
	flags.Var(peers, "peer", "NODE=HOST:PORT, where node NODE's daemon serves peers; repeat for several nodes or addresses [ZFS_CSI_PEERS, comma-separated]")
	flags.StringVar(&cfg.AddressTemplate, "peer-address-template", "", "address of a node --peer does not name, "+peer.NodePlaceholder+" standing for its node ID, e.g. "+peer.NodePlaceholder+".storage.example:7443 [ZFS_CSI_PEER_ADDRESS_TEMPLATE]")
	flags.IntVar(&cfg.MaxStreams, "peer-max-streams", peer.DefaultMaxStreams, "snapshot streams served to peers at once; more wait their turn briefly, then are refused [ZFS_CSI_PEER_MAX_STREAMS]")
	return func(nodeID string) error {
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
