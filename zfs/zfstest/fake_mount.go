package zfstest

import (
	"strings"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// Mounted reports whether ZFS itself mounts a filesystem, as its `mounted`
// property says once it is made (and again at every boot, zfs mount -a):
// a filesystem whose mountpoint, set or inherited, is a path (the pool's
// root defaults to /<pool>), with canmount=on (the default; canmount is not
// inherited). The driver makes its datasets mountpoint=legacy so that only
// the node mounts them, where the orchestrator asks; a dataset this calls
// mounted is one ZFS put on the host by itself.
func (f *Fake) Mounted(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.datasets[name]
	if !ok || d.typ != zfs.Filesystem {
		return false
	}
	if canmount, set := d.props["canmount"]; set && canmount != "on" {
		return false
	}
	mountpoint := f.inherited(d, "mountpoint")
	return mountpoint == "" || strings.HasPrefix(mountpoint, "/")
}
