package main

import (
	"context"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

const (
	nodeID     = "bench-node"
	driverName = "zfs.csi.dev"
	gib        = 1 << 30
	callLimit  = 2 * time.Minute
)

// volumeParameters are what section 1 asks for: three ZFS properties, and
// the metadata Kubernetes' external-provisioner adds with
// --extra-create-metadata (three more user properties on every volume).
func volumeParameters(name string, thin bool) map[string]string {
	parameters := map[string]string{
		"zfs.compression":                  "lz4",
		"zfs.logbias":                      "throughput",
		"zfs.sync":                         "standard",
		"csi.storage.k8s.io/pvc/name":      "pvc-" + name,
		"csi.storage.k8s.io/pvc/namespace": "bench",
		"csi.storage.k8s.io/pv/name":       "pv-" + name,
	}
	if thin {
		parameters["thin"] = "true"
	}
	return parameters
}

func mountCapability(fsType string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func blockCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// volumeRequest is a 1 GiB volume with the section-1 parameters.
func volumeRequest(name string, capability *csi.VolumeCapability, thin bool) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: gib},
		VolumeCapabilities: []*csi.VolumeCapability{capability}, Parameters: volumeParameters(name, thin)}
}

// fromSnapshot is volumeRequest with a snapshot as the content source.
func fromSnapshot(name, snapshotID string) *csi.CreateVolumeRequest {
	req := volumeRequest(name, mountCapability(""), false)
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshotID}}}
	return req
}

func fromVolume(name, volumeID string) *csi.CreateVolumeRequest {
	req := volumeRequest(name, mountCapability(""), false)
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: volumeID}}}
	return req
}

func stageRequest(volume *csi.Volume, staging string, capability *csi.VolumeCapability) *csi.NodeStageVolumeRequest {
	return &csi.NodeStageVolumeRequest{VolumeId: volume.GetVolumeId(), StagingTargetPath: staging,
		VolumeCapability: capability, VolumeContext: volume.GetVolumeContext()}
}

func publishRequest(volume *csi.Volume, staging, target string, capability *csi.VolumeCapability) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{VolumeId: volume.GetVolumeId(), StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: capability, VolumeContext: volume.GetVolumeContext()}
}

// timed runs one call under the per-call deadline and times it.
func timed(ctx context.Context, call func(context.Context) error) (time.Duration, error) {
	return timedWithin(ctx, callLimit, call)
}

// timedWithin is timed with another limit than callLimit.
func timedWithin(ctx context.Context, limit time.Duration, call func(context.Context) error) (time.Duration, error) {
	callCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	start := time.Now()
	err := call(callCtx)
	return time.Since(start), err
}
