package controller

import (
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// What a new volume is, whichever executor makes it: its size, and every
// property, native and user, set by the one command that makes it (or, for
// a pull, by the rename that makes it visible).

// minimumFilesystemSize is the least a zvol formatted with each filesystem
// can be: mkfs.xfs refuses devices under 300 MiB, mkfs.btrfs under about
// 109 MiB. Smaller requests are rounded up (or OUT_OF_RANGE when the limit
// forbids it) instead of failing later, at the first NodeStage.
var minimumFilesystemSize = map[string]uint64{"xfs": 300 << 20, "btrfs": 128 << 20}

// plannedSize is the size a new volume gets: what was asked for (or the
// source's size, or the default), never less than the source.
func plannedSize(plan volumePlan, src *source) (uint64, error) {
	granularity, fallback := uint64(1), DefaultVolumeSize
	if plan.zvol {
		granularity = max(plan.params.volBlockSize, defaultVolBlockSize)
	}
	minimum := minimumFilesystemSize[plan.fsType]
	if src != nil {
		fallback, minimum = src.size, max(minimum, src.size)
		if src.zvol && src.blockSize > 0 {
			granularity = src.blockSize // a clone keeps its source's
		}
	}
	return volumeSize(plan.capacity, granularity, fallback, minimum)
}

// volumeProperties are every property a new volume gets, driver-owned ones
// included, so that they are set by the command that creates it.
func (s *Server) volumeProperties(plan volumePlan, size uint64, fromSource bool) map[string]string {
	properties := make(map[string]string, len(plan.params.properties)+8)
	for key, value := range plan.params.properties {
		properties[key] = value
	}
	for key, value := range plan.params.metadata {
		properties[key] = value
	}
	properties[s.props.Managed] = "true"
	properties[s.props.CSIName] = rules.EncodeName(plan.name)
	properties[s.props.ParamsHash] = plan.params.hash
	if plan.fsType != "" {
		properties[s.props.FSType] = plan.fsType
	}
	if plan.sourceID != "" {
		properties[s.props.Source] = plan.sourceID
	}
	if plan.params.encryption != "" && !fromSource {
		properties["encryption"], properties["keyformat"], properties["keylocation"] = plan.params.encryption, plan.keyFormat, "prompt"
	}
	if !plan.zvol {
		properties["mountpoint"] = "legacy"
		properties["refquota"] = bytesString(size)
		if !plan.params.thin {
			properties["refreservation"] = bytesString(size)
		}
	} else if plan.params.volBlockSize != 0 && !fromSource {
		properties["volblocksize"] = bytesString(plan.params.volBlockSize)
	}
	return properties
}

// madeRow is the row a volume made with properties has, as the CO is
// answered without reading it back.
func (s *Server) madeRow(plan volumePlan, dataset string, size uint64, properties map[string]string) zfs.Dataset {
	row := zfs.Dataset{Name: dataset, Type: zfs.Filesystem, RefQuota: size, User: map[string]string{}}
	if plan.zvol {
		row = zfs.Dataset{Name: dataset, Type: zfs.Volume, VolSize: size, User: map[string]string{}}
	}
	for key, value := range properties {
		if s.props.Owns(key) {
			row.User[key] = value
		}
	}
	return row
}

// sourceGrowth are the properties a zvol made from a source of size has
// needs to be size: its volsize, and for a thick zvol the reservation ZFS
// computes for it.
func sourceGrowth(plan volumePlan, has, size uint64) map[string]string {
	grow := map[string]string{}
	if plan.zvol && size > has {
		grow["volsize"] = bytesString(size)
	}
	if plan.zvol && !plan.params.thin {
		grow["refreservation"] = "auto"
	}
	return grow
}
