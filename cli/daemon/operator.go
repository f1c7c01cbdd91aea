package daemon

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/rpc"
)

// declareOperatorFlags declares the settings of the acts only the host's
// operator may start (decision 15): whether volumes may move to and from
// this node, and the socket those acts are asked on.
func declareOperatorFlags(flags *flag.FlagSet, allowMoves *bool, socket *string) []envflag.Rule {
	flags.BoolVar(allowMoves, "allow-moves", false, "let volumes move to and from this node (zfs-csi ctl move-volume, run on the node a volume moves to); a move needs it on both nodes [ZFS_CSI_ALLOW_MOVES]")
	envflag.OperatorSocket(flags, socket)
	return []envflag.Rule{
		{Flag: "allow-moves", Check: envflag.Boolean},
		{Flag: "operator-socket", Check: envflag.Check{Allowed: "empty, or unix:///ABSOLUTE/PATH", Test: func(value any) error {
			if value.(string) == "" {
				return nil
			}
			_, err := rpc.SocketPath(value.(string))
			return err
		}}},
	}
}

// checkOperatorSocket refuses an operator's socket inside the directories
// the orchestrators keep their plugins' sockets and mounts in (kubelet's,
// Nomad's data directory): a CO's container that mounts one must not find
// the operator's acts there. The operator's own --allow-paths are not
// among them (a test's temporary directory is one). Checked with the other
// settings, before anything starts.
func checkOperatorSocket(endpoint, socket string, orchestratorDirs []string) error {
	operator, err := rpc.OperatorEndpoint(endpoint, socket)
	if err != nil {
		return envflag.ConfigError{Err: err}
	}
	path, _ := rpc.SocketPath(operator)
	for _, dir := range orchestratorDirs {
		if rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path)); err == nil && !strings.HasPrefix(rel, "..") {
			return envflag.ConfigError{Err: fmt.Errorf("the operator's socket %s lies in %s, where an orchestrator reaches: "+
				"set --operator-socket (ZFS_CSI_OPERATOR_SOCKET) outside it", path, dir)}
		}
	}
	return nil
}
