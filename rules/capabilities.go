package rules

import (
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// FormattedFSTypes are the filesystems a zvol can be formatted with for mount
// access; mount access with fsType "" or "zfs" means a ZFS dataset (ARCHITECTURE.md
// decision 4).
var FormattedFSTypes = map[string]bool{"ext4": true, "xfs": true, "btrfs": true}

// IsDatasetFSType reports whether a mount fsType asks for a ZFS dataset.
func IsDatasetFSType(fsType string) bool { return fsType == "" || fsType == "zfs" }

// CapabilityProblem explains why the driver cannot serve a capability, or is
// "" when it can. Storage is node-local, so no MULTI_NODE mode is served.
func CapabilityProblem(capability *csi.VolumeCapability) string {
	if capability == nil {
		return "volume capability is missing"
	}
	switch mode := capability.GetAccessMode().GetMode(); mode {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
	case csi.VolumeCapability_AccessMode_UNKNOWN:
		return "access mode is missing"
	default:
		return fmt.Sprintf("access mode %s is not supported: volumes are local to one node", mode)
	}
	switch {
	case capability.GetBlock() != nil:
		return ""
	case capability.GetMount() != nil:
		if fsType := capability.GetMount().GetFsType(); !IsDatasetFSType(fsType) && !FormattedFSTypes[fsType] {
			return fmt.Sprintf("filesystem type %q is not supported (use zfs, ext4, xfs or btrfs)", Bounded(fsType))
		}
		return ""
	default:
		return "access type (mount or block) is missing"
	}
}

// KindServes explains why a volume of this kind cannot serve a capability, or
// is "". A volume is served only as the kind it was made (ARCHITECTURE.md
// decision 4): a dataset is only mounted, a raw zvol only used as a block device, a
// formatted zvol only mounted with its own filesystem type. Raw access to a
// formatted zvol would let a job read and write under a filesystem another
// workload mounts (or hand the kernel a crafted one at its next mount), and
// mounting a raw zvol would format its data away. The handlers answer
// FAILED_PRECONDITION: the spec's "exceeds capabilities", the volume does
// not have the capability asked for, as when the CO asks a MULTI_NODE mode;
// ValidateVolumeCapabilities declines to confirm it. One rule for both
// (ARCHITECTURE.md "one home for each rule").
func KindServes(kind, fsType string, capability *csi.VolumeCapability) string {
	requested := capability.GetMount().GetFsType()
	switch {
	case capability.GetBlock() != nil && kind == KindDataset:
		return "block access needs a zvol; this volume is a ZFS dataset"
	case capability.GetBlock() != nil && fsType != "":
		return fmt.Sprintf("this volume is a zvol formatted %s for mount access; it is not served as a raw block device", fsType)
	case capability.GetBlock() != nil:
		return ""
	case kind == KindDataset && !IsDatasetFSType(requested):
		return fmt.Sprintf("this volume is a ZFS dataset, not mountable as %q", requested)
	case kind == KindZvol && fsType == "":
		return "this volume is a raw block zvol without a filesystem; it can only be used as a block device"
	case kind == KindZvol && requested != fsType:
		return fmt.Sprintf("this volume is a zvol formatted %s, not mountable as %q", fsType, requested)
	}
	return ""
}
