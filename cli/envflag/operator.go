package envflag

import "flag"

// OperatorSocket declares the flag naming the operator's socket, where the
// daemon serves the acts only the host's operator may start (a move), and
// where `zfs-csi ctl` asks for them.
func OperatorSocket(flags *flag.FlagSet, socket *string) {
	flags.StringVar(socket, "operator-socket", "",
		"the operator's unix socket: moves, served apart from every socket a CO reaches; empty: operator.sock beside the CSI socket [ZFS_CSI_OPERATOR_SOCKET]")
}
