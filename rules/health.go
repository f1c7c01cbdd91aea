package rules

import (
	"fmt"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// Health, as the CSI health RPCs report it, derived from what `zpool status`
// says of a pool: every volume of a pool shares its pool's condition. The
// controller and the node service add what is particular to one volume (its
// dataset gone, its mounts or device gone).

// poolUnreachable are the pool states in which no volume of it can be used.
var poolUnreachable = map[string]bool{"FAULTED": true, "UNAVAIL": true, "SUSPENDED": true, "OFFLINE": true, "REMOVED": true}

// PoolReachable reports whether volumes of a pool in this state can be read
// at all (a volume's own checks make sense only then).
func PoolReachable(status zfs.PoolStatus) bool { return !poolUnreachable[status.State] }

// PoolVolumeHealth is the health every volume of the pool shares: nothing
// for a healthy pool.
func PoolVolumeHealth(status zfs.PoolStatus) []*csi.VolumeHealth_VolumeHealthEntry {
	var entries []*csi.VolumeHealth_VolumeHealthEntry
	add := func(kind csi.VolumeHealthErrorType, reason, message string) {
		entries = append(entries, &csi.VolumeHealth_VolumeHealthEntry{Status: kind, Reason: reason, Message: message})
	}
	for _, problem := range poolProblems(status) {
		kind := csi.VolumeHealthErrorType_DEGRADED
		switch problem.reason {
		case "PoolUnreachable":
			kind = csi.VolumeHealthErrorType_INACCESSIBLE
		case "PoolDataErrors":
			kind = csi.VolumeHealthErrorType_DATA_LOSS
		}
		add(kind, problem.reason, problem.message)
	}
	return entries
}

// PoolStorageHealth is a pool's health as a storage backend of this node.
func PoolStorageHealth(status zfs.PoolStatus) []*csi.NodeGetStorageHealthResponse_StorageBackendHealth {
	var entries []*csi.NodeGetStorageHealthResponse_StorageBackendHealth
	for _, problem := range poolProblems(status) {
		kind := csi.StorageHealthErrorType_STORAGE_DEGRADED
		if problem.reason == "PoolUnreachable" {
			kind = csi.StorageHealthErrorType_STORAGE_UNREACHABLE
		}
		entries = append(entries, &csi.NodeGetStorageHealthResponse_StorageBackendHealth{Status: kind, Reason: problem.reason, Message: problem.message})
	}
	return entries
}

type poolProblem struct{ reason, message string }

// poolProblems lists what is wrong with a pool, each once.
func poolProblems(status zfs.PoolStatus) []poolProblem {
	var problems []poolProblem
	switch {
	case poolUnreachable[status.State]:
		problems = append(problems, poolProblem{"PoolUnreachable", fmt.Sprintf("pool %s is %s", status.Name, status.State)})
	case status.State == "DEGRADED":
		problems = append(problems, poolProblem{"PoolDegraded", fmt.Sprintf("pool %s is DEGRADED: %s (zpool status %s)",
			status.Name, strings.Join(status.Unhealthy, ", "), status.Name)})
	}
	if status.ReadErrors+status.WriteErrors+status.ChecksumErrors > 0 {
		problems = append(problems, poolProblem{"PoolDeviceErrors", fmt.Sprintf(
			"the devices of pool %s had %d read, %d write and %d checksum errors (zpool status %s; zpool clear %s once the cause is fixed)",
			status.Name, status.ReadErrors, status.WriteErrors, status.ChecksumErrors, status.Name, status.Name)})
	}
	if status.DataErrors > 0 {
		problems = append(problems, poolProblem{"PoolDataErrors", fmt.Sprintf(
			"pool %s has %d data errors it could not repair (zpool status -v %s lists the files)", status.Name, status.DataErrors, status.Name)})
	}
	return problems
}

// VolumeHealthEntry is one volume's own condition.
func VolumeHealthEntry(kind csi.VolumeHealthErrorType, reason, format string, args ...any) *csi.VolumeHealth_VolumeHealthEntry {
	return &csi.VolumeHealth_VolumeHealthEntry{Status: kind, Reason: reason, Message: fmt.Sprintf(format, args...)}
}
