package nodetest

import (
	"fmt"

	"github.com/zfs-csi/zfs-csi/node"
)

// DatasetBytes is the size the fake reports for every mounted dataset.
const DatasetBytes = 1 << 30

// Statfs implements Mounter for the mount points it knows.
func (f *FakeMounter) Statfs(path string) (node.FSStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mount := node.MountAt(f.mounts, kernelPath(path, true))
	switch {
	case mount == nil:
		return node.FSStats{}, fmt.Errorf("statfs %s: the fake knows only mount points", path)
	case mount.FSType == "zfs":
		referenced, available, ok := uint64(128<<10), uint64(DatasetBytes-128<<10), true
		if f.DatasetSpace != nil {
			referenced, available, ok = f.DatasetSpace(mount.Source)
		}
		if !ok {
			return node.FSStats{}, fmt.Errorf("statfs %s: %s is gone", path, mount.Source)
		}
		return DatasetStatfs(referenced, available), nil
	}
	device := f.device(mount.Source)
	if device == nil {
		return node.FSStats{}, fmt.Errorf("statfs %s: not a filesystem", path)
	}
	return node.FSStats{TotalBytes: device.fsSize, AvailableBytes: device.fsSize - 1<<20, UsedBytes: 1 << 20,
		TotalInodes: device.fsSize >> 14, FreeInodes: device.fsSize>>14 - 11, UsedInodes: 11}, nil
}

// DatasetStatfs is what statfs(2) says of a mounted dataset, by OpenZFS's
// zfs_statvfs (module/os/linux/zfs/zfs_vfsops.c): the block size is the
// recordsize (128 KiB), the blocks are referenced + available bytes and
// the free blocks the available bytes, each rounded down to whole blocks,
// with nothing reserved for root; the free inodes are the available bytes
// over the 512-byte dnode, the files those plus the objects in use (a new
// dataset holds datasetObjects).
func DatasetStatfs(referenced, available uint64) node.FSStats {
	const recordShift, dnodeShift = 17, 9
	blocks, free := (referenced+available)>>recordShift, available>>recordShift
	freeInodes := available >> dnodeShift
	return node.FSStats{TotalBytes: blocks << recordShift, AvailableBytes: free << recordShift, UsedBytes: (blocks - free) << recordShift,
		TotalInodes: freeInodes + datasetObjects, FreeInodes: freeInodes, UsedInodes: datasetObjects}
}

// datasetObjects are the objects of an empty dataset's filesystem as statfs
// counts them (f_files - f_ffree on a fresh dataset in the guest).
const datasetObjects = 6
