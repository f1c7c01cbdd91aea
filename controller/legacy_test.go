package controller

import "testing"

// TestZFSMountsNoVolumeByItself: every filesystem volume the controller
// makes is mountpoint=legacy, so ZFS mounts none on the host by itself (not
// when it is made, not at boot); only the node mounts it, where the
// orchestrator asks (ARCHITECTURE.md decision 8). Dropping the property
// from one of the ways a volume is made fails here.
func TestZFSMountsNoVolumeByItself(t *testing.T) {
	h := newHarness(t)
	source := h.create(createRequest("source", 1<<30, mountCapability(""))).GetVolumeId()
	snapshot := h.snapshot("snap", source).GetSnapshotId()
	made := map[string]string{"a new volume": source}
	made["a restore"] = h.create(fromSnapshot(createRequest("restore", 1<<30, mountCapability("")), snapshot)).GetVolumeId()
	made["a clone"] = h.create(fromVolume(createRequest("clone", 1<<30, mountCapability("")), source)).GetVolumeId()
	copied := fromSnapshot(createRequest("copy", 1<<30, mountCapability("")), snapshot)
	copied.Parameters = map[string]string{ParamSourceMode: "copy"}
	made["a copy"] = h.create(copied).GetVolumeId()
	for what, volumeID := range made {
		if dataset := datasetOf(t, volumeID); h.fake.Mounted(dataset) {
			t.Errorf("%s (%s) is mounted by ZFS itself: mountpoint %q", what, dataset, h.fake.Property(dataset, "mountpoint"))
		}
	}
}
