package inventory

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/rules"
)

// Finding kinds.
const (
	FindingParent         = "parent"              // a parent dataset is missing or its pool unhealthy
	FindingDeletedStuck   = "deleted-stuck"       // deleted, nothing holds it, still there: the reaper is not doing its job
	FindingStaleMount     = "stale-mount"         // a mount under a CO directory whose volume is gone
	FindingMissingMarker  = "missing-marker"      // a dataset of the driver lacks a user property it needs
	FindingMissingDevLink = "missing-device-link" // a zvol without its /dev/zvol link
)

// Finding is one problem doctor reports, with what to do about it.
type Finding struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"` // the dataset, pool or mount point concerned
	Problem string `json:"problem"`
	Fix     string `json:"fix"`
}

// Diagnose looks for what the driver cannot repair by itself. inv must have
// been Placed on the same mounts.
func (h Host) Diagnose(cfg rules.Config, inv Inventory, mounts []node.MountInfo) []Finding {
	props := rules.NewUserProps(cfg.DriverName)
	var findings []Finding
	add := func(kind, subject, problem, fix string, args ...any) {
		findings = append(findings, Finding{Kind: kind, Subject: subject, Problem: problem, Fix: fmt.Sprintf(fix, args...)})
	}
	for _, parent := range inv.Parents {
		if !parent.Exists {
			add(FindingParent, parent.Name, "the parent dataset does not exist; the daemon refuses to start",
				"create it (zfs create %s) or correct --parent-dataset", parent.Name)
		}
	}
	for _, pool := range inv.Pools {
		if pool.Health != "ONLINE" {
			add(FindingParent, pool.Name, "the pool is "+pool.Health, "see zpool status -v %s", pool.Name)
		}
	}
	for _, volume := range inv.Volumes {
		findings = append(findings, h.volumeFindings(props, volume, mounts)...)
	}
	for _, snapshot := range inv.Snapshots {
		if snapshot.State == SnapshotInternal && len(snapshot.Clones) == 0 {
			add(FindingDeletedStuck, snapshot.Name,
				"an internal snapshot (made to clone a volume) has no clone left, yet it exists: the reaper has not destroyed it",
				"check that the daemon runs (systemctl status zfs-csi); or destroy it: zfs destroy %s", snapshot.Name)
		}
	}
	for _, volume := range inv.Unmarked {
		add(FindingMissingMarker, volume.Dataset,
			fmt.Sprintf("it carries %s=%s but not %s=true, so the driver ignores it (never lists, mounts or deletes it)",
				props.CSIName, volume.CSIName, props.Managed),
			"if the driver made it, mark it: zfs set %s=true %s; if not, drop the name: zfs inherit %s %s",
			props.Managed, volume.Dataset, props.CSIName, volume.Dataset)
	}
	return append(findings, h.staleMounts(cfg, inv, mounts)...)
}

// volumeFindings are the problems of one volume of the driver.
func (h Host) volumeFindings(props rules.UserProps, volume Volume, mounts []node.MountInfo) []Finding {
	var findings []Finding
	add := func(kind, problem, fix string, args ...any) {
		findings = append(findings, Finding{Kind: kind, Subject: volume.Dataset, Problem: problem, Fix: fmt.Sprintf(fix, args...)})
	}
	if volume.State == StateDeletedStuck {
		if mounted := append(append([]string{}, volume.Staged...), volume.Published...); len(mounted) > 0 {
			add(FindingDeletedStuck, "the CO deleted this volume and nothing holds it, but it is still mounted, so it cannot be destroyed",
				"unmount it (umount %s); the reaper then destroys it", strings.Join(mounted, " ; umount "))
		} else {
			add(FindingDeletedStuck, "the CO deleted this volume and nothing holds it any more, yet it exists: the reaper has not run",
				"check that the daemon runs (systemctl status zfs-csi) and what its log says about reaping; or destroy it: zfs destroy -r %s",
				volume.Dataset)
		}
	}
	if volume.CSIName == "" {
		add(FindingMissingMarker, fmt.Sprintf("it is marked %s=true but has no %s, so a CreateVolume retry cannot find it", props.Managed, props.CSIName),
			"set the name the CO knows it by: zfs set %s=<name> %s", props.CSIName, volume.Dataset)
	}
	if volume.Kind != rules.KindZvol || volume.State != StateOK {
		return findings
	}
	if volume.Device == "" {
		add(FindingMissingDevLink, "the zvol has no "+h.ZvolLink(volume.Dataset)+" link, so it cannot be staged",
			"ask udev for it: udevadm trigger --action=add --subsystem-match=block && udevadm settle; "+
				"if it stays missing, check zfs get volmode %s (none hides the device)", volume.Dataset)
		return findings
	}
	for _, mount := range mounts {
		if rules.FormattedFSTypes[mount.FSType] && h.shows(volume, mount) && mount.FSType != volume.FSType {
			problem := fmt.Sprintf("it is mounted as %s at %s but its %s says %q", mount.FSType, mount.MountPoint, props.FSType, volume.FSType)
			if volume.FSType == "" {
				problem = fmt.Sprintf("it is mounted as %s at %s but has no %s, so it is listed and staged as a raw block volume",
					mount.FSType, mount.MountPoint, props.FSType)
			}
			add(FindingMissingMarker, problem, "record its filesystem: zfs set %s=%s %s", props.FSType, mount.FSType, volume.Dataset)
			break
		}
	}
	return findings
}

// nodeExists reports whether /dev holds a device node of that name.
func (h Host) nodeExists(name string) bool {
	_, err := os.Stat(filepath.Join(h.devDir(), name))
	return err == nil
}

// staleMounts are mounts under the CO directories whose volume is gone: a
// dataset under a parent that is no live volume, or a zvol device node
// whose zvol was destroyed or deleted.
func (h Host) staleMounts(cfg rules.Config, inv Inventory, mounts []node.MountInfo) []Finding {
	live, liveDevices, deletedDevices := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, volume := range inv.Volumes {
		switch {
		case volume.State == StateOK:
			live[volume.Dataset] = true
			liveDevices[filepath.Base(volume.Device)] = volume.Device != ""
		case volume.Device != "":
			deletedDevices[filepath.Base(volume.Device)] = true
		}
	}
	var findings []Finding
	for _, mount := range mounts {
		if !h.underCODir(mount.MountPoint) {
			continue
		}
		var problem string
		// A bind whose node was made anew still shows the device of that
		// name (node.VolumeMounts.IsDeviceBind); only one no live volume
		// shows is gone.
		name, _, device := node.BoundDevice(mount)
		switch {
		case mount.FSType == "zfs" && cfg.OwnedDataset(mount.Source) && !live[mount.Source]:
			problem = "it shows " + mount.Source + ", which is no live volume (deleted or destroyed)"
		case device && !liveDevices[name] && (node.VanishedZvolDevice(mount) || strings.HasPrefix(name, "zd") && !h.nodeExists(name)):
			problem = "it shows the device node " + name + ", which is gone: its zvol was destroyed"
		case device && deletedDevices[name]:
			problem = "it shows the device node " + name + " of a volume the CO deleted"
		case rules.FormattedFSTypes[mount.FSType] && deletedDevices[filepath.Base(mount.Source)]:
			problem = "it shows " + mount.Source + ", the device of a volume the CO deleted"
		default:
			continue
		}
		findings = append(findings, Finding{Kind: FindingStaleMount, Subject: mount.MountPoint,
			Problem: problem + "; the CO no longer unmounts it",
			Fix:     fmt.Sprintf("make sure no workload uses it, then: umount %s", mount.MountPoint)})
	}
	return findings
}
