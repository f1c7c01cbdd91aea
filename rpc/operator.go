package rpc

import "path/filepath"

// The operator's service (decision 15): acts only the host's operator may
// start, on a socket of their own (OperatorEndpoint) that no CO's
// socket serves. The controller implements it; `zfs-csi ctl` calls it.
const (
	OperatorService = "zfscsi.operator.v1.Operator"
	// OperatorMoveRound and OperatorMoveFinal take a CreateVolumeRequest
	// whose content source is another node's volume, and answer a
	// CreateVolumeResponse: a round of a move while the workload runs, and
	// the final round once it stopped.
	OperatorMoveRound = "MoveRound"
	OperatorMoveFinal = "MoveFinal"
	// OperatorAdopt takes existing data under the driver and OperatorRelease
	// gives a volume back (controller/adopt.go). Their requests and answers
	// are google.protobuf.Struct with the Adopt… field names; the answer of
	// both is a csi.Volume.
	OperatorAdopt   = "Adopt"
	OperatorRelease = "Release"
)

// Field names of OperatorAdopt's and OperatorRelease's requests (strings).
const (
	AdoptDataset        = "dataset"
	AdoptName           = "name"
	AdoptMode           = "mode" // "retain" or "own"
	AdoptRename         = "rename"
	AdoptParent         = "parent"
	AdoptFSType         = "fs_type"
	AdoptSize           = "size"
	AdoptKeyFromSecrets = "key_from_secrets"
	ReleaseVolumeID     = "volume_id"
)

// OperatorEndpoint is where the operator's socket is: operator when given,
// else operator.sock beside the CSI socket of endpoint (so that two
// daemons on one host, each with its own CSI socket, each have their own).
// The daemon refuses one where an orchestrator reaches (its checks).
func OperatorEndpoint(endpoint, operator string) (string, error) {
	if operator != "" {
		return operator, nil
	}
	path, err := SocketPath(endpoint)
	if err != nil {
		return "", err
	}
	return "unix://" + filepath.Join(filepath.Dir(path), "operator.sock"), nil
}
