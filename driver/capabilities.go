package driver

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
