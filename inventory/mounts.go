package inventory

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/zfs-csi/zfs-csi/node"
)

// Host is where the host-side facts come from; tests point it at files.
type Host struct {
	// MountInfo is the mount table; "" means /proc/self/mountinfo.
	MountInfo string
	// DevDir holds the zvol links (DevDir/zvol/<dataset>); "" means /dev.
	DevDir string
	// CODirs are where container orchestrators stage and publish volumes
	// (kubelet's root, Nomad's CSI directory); doctor looks for mounts left
	// there.
	CODirs []string
}

// DefaultCODirs are kubelet's root directory and Nomad's default client data
// directory.
func DefaultCODirs() []string { return slices.Clone(node.DefaultPathRoots) }

func (h Host) mountInfoPath() string {
	if h.MountInfo == "" {
		return "/proc/self/mountinfo"
	}
	return h.MountInfo
}

func (h Host) devDir() string {
	if h.DevDir == "" {
		return "/dev"
	}
	return h.DevDir
}

// Mounts reads the mount table, with the node service's own parser.
func (h Host) Mounts() ([]node.MountInfo, error) { return node.ReadMountInfo(h.mountInfoPath()) }

// ZvolLink is the udev link of a zvol.
func (h Host) ZvolLink(dataset string) string {
	return filepath.Join(h.devDir(), "zvol", dataset)
}

// Device resolves a zvol's link to its device node, "" when the link is
// missing or dangling.
func (h Host) Device(dataset string) string {
	device, err := filepath.EvalSymlinks(h.ZvolLink(dataset))
	if err != nil {
		return ""
	}
	return device
}

// Place fills in each zvol's device and each volume's staging and publish
// mounts from the mount table.
func (h Host) Place(inv *Inventory, mounts []node.MountInfo) {
	for i := range inv.Volumes {
		volume := &inv.Volumes[i]
		if volume.Kind == "zvol" {
			volume.Device = h.Device(volume.Dataset)
		}
		var unsorted []string
		for _, mount := range mounts {
			if !h.shows(*volume, mount) {
				continue
			}
			switch mountRole(mount) {
			case roleStaged:
				volume.Staged = append(volume.Staged, mount.MountPoint)
			case rolePublished:
				volume.Published = append(volume.Published, mount.MountPoint)
			default:
				unsorted = append(unsorted, mount.MountPoint)
			}
		}
		// Outside the CO's directory layouts (a debugging session with ctl,
		// say), the node service stages before it publishes, and the mount
		// table is in mount order: the first mount is the staging one.
		for _, path := range unsorted {
			if len(volume.Staged) == 0 {
				volume.Staged = append(volume.Staged, path)
			} else {
				volume.Published = append(volume.Published, path)
			}
		}
	}
}

// shows reports whether a mount shows a volume, by the node service's own
// rule, so that the reports and the node never disagree about a mount.
func (h Host) shows(volume Volume, mount node.MountInfo) bool {
	recognise := node.VolumeMounts{Dataset: volume.Dataset}
	if volume.Kind == "zvol" {
		recognise.Link, recognise.Device = h.ZvolLink(volume.Dataset), volume.Device
	}
	return recognise.Shows(mount)
}

type role int

const (
	roleUnknown role = iota
	roleStaged
	rolePublished
)

// mountRole tells staging from publish mounts by the directory layouts of
// kubelet (…/kubernetes.io/csi/…/globalmount, …/volumeDevices/staging/… for
// staging; …/volumes/kubernetes.io~csi/…/mount, …/volumeDevices/publish/…
// for publish) and Nomad (…/staging/…, …/per-alloc/…).
func mountRole(mount node.MountInfo) role {
	path := mount.MountPoint
	switch {
	case strings.HasSuffix(path, "/globalmount") || strings.Contains(path, "/volumeDevices/staging/") ||
		strings.Contains(path, "/staging/"):
		return roleStaged
	case strings.Contains(path, "/volumes/kubernetes.io~csi/") || strings.Contains(path, "/volumeDevices/publish/") ||
		strings.Contains(path, "/per-alloc/"):
		return rolePublished
	}
	return roleUnknown
}

// underCODir reports whether path lies in one of the CO directories.
func (h Host) underCODir(path string) bool {
	dirs := h.CODirs
	if dirs == nil {
		dirs = DefaultCODirs()
	}
	for _, dir := range dirs {
		dir = strings.TrimSuffix(dir, "/")
		if dir != "" && (path == dir || strings.HasPrefix(path, dir+"/")) {
			return true
		}
	}
	return false
}
