package node

import (
	"reflect"
	"strings"
	"testing"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// mountinfoSample holds lines recorded in the e2e guest (Debian 12, OpenZFS
// 2.3.2): a dataset, a read-only bind of it, an ext4 zvol, a btrfs zvol
// (which names the path it was mounted with), a zvol's device node bound
// onto a file, and a mount point with a space.
const mountinfoSample = `27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
35 27 0:31 / /mnt/s1 rw,relatime - zfs tank/ds1 rw,xattr,noacl,casesensitive
36 27 0:31 / /mnt/t1 ro,relatime - zfs tank/ds1 rw,xattr,noacl,casesensitive
39 27 230:16 / /mnt/e2 rw,noatime - ext4 /dev/zd16 rw,discard,stripe=16
37 27 0:33 / /mnt/b4 rw,relatime - btrfs /dev/zvol/tank/zv4 rw,ssd,space_cache=v2,subvolid=5,subvol=/
41 27 0:5 /zd0 /mnt/blk ro,nosuid,relatime - devtmpfs udev rw,size=1981496k,nr_inodes=495374,mode=755,inode64
42 27 0:31 / /mnt/with\040space rw,relatime - zfs tank/ds1 rw,xattr,noacl,casesensitive
`

func TestParseMountInfo(t *testing.T) {
	mounts, err := ParseMountInfo(strings.NewReader(mountinfoSample))
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 7 {
		t.Fatalf("parsed %d mounts", len(mounts))
	}
	want := MountInfo{ID: 41, ParentID: 27, MajorMinor: "0:5", Root: "/zd0", MountPoint: "/mnt/blk",
		Options: []string{"ro", "nosuid", "relatime"}, FSType: "devtmpfs", Source: "udev",
		SuperOptions: []string{"rw", "size=1981496k", "nr_inodes=495374", "mode=755", "inode64"}}
	if !reflect.DeepEqual(mounts[5], want) {
		t.Errorf("got %+v\nwant %+v", mounts[5], want)
	}
	if mounts[6].MountPoint != "/mnt/with space" {
		t.Errorf("escaped mount point parsed as %q", mounts[6].MountPoint)
	}
	if _, err := ParseMountInfo(strings.NewReader("1 2 3\n")); err == nil {
		t.Error("a short line parsed")
	}
}

func TestVolumeMountsRecogniseEveryWayAVolumeIsMounted(t *testing.T) {
	mounts, err := ParseMountInfo(strings.NewReader(mountinfoSample))
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]volumeMounts{
		"tank/ds1": {dataset: "tank/ds1", link: "/dev/zvol/tank/ds1"},
		"tank/zv0": {dataset: "tank/zv0", link: "/dev/zvol/tank/zv0", device: "/dev/zd0"},
		"tank/zv2": {dataset: "tank/zv2", link: "/dev/zvol/tank/zv2", device: "/dev/zd16"},
		"tank/zv4": {dataset: "tank/zv4", link: "/dev/zvol/tank/zv4", device: "/dev/zd48"},
	}
	want := map[string]string{"/": "", "/mnt/s1": "tank/ds1", "/mnt/t1": "tank/ds1", "/mnt/e2": "tank/zv2",
		"/mnt/b4": "tank/zv4", "/mnt/blk": "tank/zv0", "/mnt/with space": "tank/ds1"}
	for _, mount := range mounts {
		var got []string
		for name, owner := range owners {
			if owner.owns(mount) {
				got = append(got, name)
			}
		}
		if len(got) > 1 || strings.Join(got, "") != want[mount.MountPoint] {
			t.Errorf("%s is recognised as %v, want %q", mount.MountPoint, got, want[mount.MountPoint])
		}
	}
	if !owners["tank/zv0"].isDeviceBind(mounts[5]) || owners["tank/zv2"].isDeviceBind(mounts[3]) {
		t.Error("device binds are not told from filesystems")
	}
}

func TestMountAtFindsTheTopmostOfStackedMounts(t *testing.T) {
	lower := MountInfo{ID: 40, ParentID: 1, MountPoint: "/a", Source: "lower"}
	upper := MountInfo{ID: 50, ParentID: 40, MountPoint: "/a", Source: "upper"}
	top := MountInfo{ID: 60, ParentID: 50, MountPoint: "/a", Source: "top"}
	other := MountInfo{ID: 70, ParentID: 60, MountPoint: "/a/b", Source: "other"}
	for _, order := range [][]MountInfo{{lower, upper, top, other}, {top, upper, lower, other}, {lower, top, other, upper}} {
		if got := mountAt(order, "/a"); got == nil || got.Source != "top" {
			t.Errorf("in %v got %+v", order, got)
		}
	}
	mounts := []MountInfo{lower}
	if mountAt(mounts, "/b") != nil {
		t.Error("found a mount where there is none")
	}
}

func TestToolEnvironmentIsInTheCLocale(t *testing.T) {
	env := zfs.CLocaleEnv([]string{"PATH=/bin", "LANG=de_DE.UTF-8", "LC_MESSAGES=fr_FR", "LANGUAGE=de", "HOME=/root"})
	if !reflect.DeepEqual(env, []string{"PATH=/bin", "HOME=/root", "LC_ALL=C"}) {
		t.Errorf("got %v", env)
	}
}
