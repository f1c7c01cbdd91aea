package wiring

import (
	"context"

	"github.com/zfs-csi/zfs-csi/inventory"
	"github.com/zfs-csi/zfs-csi/metrics"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// MetricsState reads what the pool and volume metrics show: one zfs list of
// the volumes (not their snapshots) and one zpool list per pool.
func MetricsState(ctx context.Context, z zfs.Interface, cfg rules.Config) (metrics.State, error) {
	inv, err := inventory.ReadVolumes(ctx, z, cfg)
	if err != nil {
		return metrics.State{}, err
	}
	state := metrics.State{Pools: inv.Pools, ReaperBacklog: inv.ReaperBacklog()}
	for _, parent := range inv.Parents {
		if parent.Exists {
			state.Parents = append(state.Parents, metrics.Parent{Name: parent.Name, Pool: parent.Pool, Available: parent.Available, Used: parent.Used})
		}
	}
	for _, volume := range inv.Live() {
		state.Volumes = append(state.Volumes, metrics.Volume{
			ID: volume.ID, CSIName: volume.CSIName, Kind: volume.Kind, PVCNamespace: volume.PVCNamespace, PVCName: volume.PVCName,
			Capacity: volume.Capacity, LogicalUsed: volume.LogicalUsed, Referenced: volume.Referenced,
			UsedBySnapshots: volume.UsedBySnapshots, CompressRatio: volume.CompressRatio,
		})
	}
	return state, nil
}
