package driver

// The operator's service (decision 15): acts only the host's operator may
// start, on a socket of their own (DefaultOperatorSocket) that no CO's
// socket serves. The controller implements it; `zfs-csi ctl` calls it.
const (
	OperatorService = "zfscsi.operator.v1.Operator"
	// OperatorMoveRound and OperatorMoveFinal take a CreateVolumeRequest
	// whose content source is another node's volume, and answer a
	// CreateVolumeResponse: a round of a move while the workload runs, and
	// the final round once it stopped.
	OperatorMoveRound = "MoveRound"
	OperatorMoveFinal = "MoveFinal"
	// DefaultOperatorSocket is where the daemon serves it: beside the CSI
	// socket, root's alone, in no directory an orchestrator mounts.
	DefaultOperatorSocket = "unix:///run/zfs-csi/operator.sock"
)
