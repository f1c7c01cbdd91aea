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

// moreMountinfo are mounts the node and the operator tools once judged
// differently: a raw block bind whose node udev made anew (the kernel marks
// the old one deleted) and a kubelet subPath bind of a directory in an ext4
// zvol.
const moreMountinfo = `43 27 0:5 /zd0//deleted /mnt/blk2 rw,nosuid,relatime - devtmpfs udev rw,size=1981496k
44 27 230:16 /sub /mnt/subpath rw,noatime - ext4 /dev/zd16 rw,discard,stripe=16
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

// oddMountinfo holds lines the kernel printed for odd mounts, recorded in a
// private mount namespace on the development host (tmpfs with an empty
// source, paths with a space, a newline, a tab and a backslash, overlay, a
// bind stacked on a mount) and on a systemd host (autofs, optional fields).
const oddMountinfo = `62 42 0:38 / /tmp/odd/e rw,relatime - tmpfs  rw
63 42 0:39 / /tmp/odd/with\040space rw,relatime - tmpfs src\040with\040space rw
64 42 0:40 / /tmp/odd/new\012line rw,relatime - tmpfs none rw
65 42 0:41 / /tmp/odd/tab\011x rw,relatime - tmpfs none rw
66 42 0:42 / /tmp/odd/back\134slash rw,relatime - tmpfs none rw
69 42 0:43 / /tmp/odd/merged rw,relatime - overlay overlay rw,lowerdir=/tmp/odd/lower,upperdir=/tmp/odd/upper,workdir=/tmp/odd/work,uuid=on
70 62 0:39 / /tmp/odd/e rw,relatime - tmpfs src\040with\040space rw
135 25 0:32 / /proc/sys/fs/binfmt_misc rw,relatime shared:13 - autofs systemd-1 rw,fd=29,pgrp=1,timeout=0,minproto=5,maxproto=5,direct,pipe_ino=17610
136 135 0:34 / /proc/sys/fs/binfmt_misc rw,nosuid,nodev,noexec,relatime shared:14 master:2 - binfmt_misc binfmt_misc rw
`

func TestParseMountInfoAcceptsEverythingTheKernelPrints(t *testing.T) {
	mounts, err := ParseMountInfo(strings.NewReader(oddMountinfo + mountinfoSample))
	if err != nil {
		t.Fatalf("one odd mount broke the whole table: %v", err)
	}
	byID := map[int]MountInfo{}
	for _, mount := range mounts {
		byID[mount.ID] = mount
	}
	for _, test := range []struct {
		name                       string
		id                         int
		mountPoint, fsType, source string
	}{
		{"an empty source stays empty", 62, "/tmp/odd/e", "tmpfs", ""},
		{"spaces are unescaped in the mount point and the source", 63, "/tmp/odd/with space", "tmpfs", "src with space"},
		{"a newline is unescaped", 64, "/tmp/odd/new\nline", "tmpfs", "none"},
		{"a tab is unescaped", 65, "/tmp/odd/tab\tx", "tmpfs", "none"},
		{"a backslash is unescaped", 66, `/tmp/odd/back\slash`, "tmpfs", "none"},
		{"overlay keeps its options", 69, "/tmp/odd/merged", "overlay", "overlay"},
		{"autofs with an optional field", 135, "/proc/sys/fs/binfmt_misc", "autofs", "systemd-1"},
		{"two optional fields", 136, "/proc/sys/fs/binfmt_misc", "binfmt_misc", "binfmt_misc"},
	} {
		t.Run(test.name, func(t *testing.T) {
			mount, ok := byID[test.id]
			if !ok || mount.MountPoint != test.mountPoint || mount.FSType != test.fsType || mount.Source != test.source {
				t.Errorf("mount %d parsed as %+v (found %v), want %q %s from %q", test.id, mount, ok, test.mountPoint, test.fsType, test.source)
			}
		})
	}
	if top := MountAt(mounts, "/tmp/odd/e"); top == nil || top.ID != 70 {
		t.Errorf("the bind stacked on the empty-source tmpfs is not the top mount: %+v", top)
	}
}

func TestVolumeMountsRecogniseEveryWayAVolumeIsMounted(t *testing.T) {
	mounts, err := ParseMountInfo(strings.NewReader(mountinfoSample + moreMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]VolumeMounts{
		"tank/ds1": {Dataset: "tank/ds1", Link: "/dev/zvol/tank/ds1"},
		"tank/zv0": {Dataset: "tank/zv0", Link: "/dev/zvol/tank/zv0", Device: "/dev/zd0"},
		"tank/zv2": {Dataset: "tank/zv2", Link: "/dev/zvol/tank/zv2", Device: "/dev/zd16"},
		"tank/zv4": {Dataset: "tank/zv4", Link: "/dev/zvol/tank/zv4", Device: "/dev/zd48"},
	}
	want := map[string]string{"/": "", "/mnt/s1": "tank/ds1", "/mnt/t1": "tank/ds1", "/mnt/e2": "tank/zv2",
		"/mnt/b4": "tank/zv4", "/mnt/blk": "tank/zv0", "/mnt/with space": "tank/ds1",
		"/mnt/blk2": "tank/zv0", "/mnt/subpath": "tank/zv2"}
	for _, mount := range mounts {
		var got []string
		for name, owner := range owners {
			if owner.Shows(mount) {
				got = append(got, name)
			}
		}
		if len(got) > 1 || strings.Join(got, "") != want[mount.MountPoint] {
			t.Errorf("%s is recognised as %v, want %q", mount.MountPoint, got, want[mount.MountPoint])
		}
	}
	if !owners["tank/zv0"].IsDeviceBind(mounts[5]) || owners["tank/zv2"].IsDeviceBind(mounts[3]) {
		t.Error("device binds are not told from filesystems")
	}
}

func TestVolumeMountsDoNotClaimNamesThatOnlyBeginAlike(t *testing.T) {
	volume := VolumeMounts{Dataset: "tank/csi/a", Link: "/dev/zvol/tank/csi/a", Device: "/dev/zd16"}
	for _, mount := range []MountInfo{
		{FSType: "zfs", Source: "tank/csi/ab", Root: "/", MountPoint: "/m/1"},
		{FSType: "zfs", Source: "tank/csi/a/child", Root: "/", MountPoint: "/m/2"},
		{FSType: "zfs", Source: "tank/csi/a@snapshot", Root: "/", MountPoint: "/m/3"},
		{FSType: "zfs", Source: "tank/csi", Root: "/", MountPoint: "/m/4"},
		{FSType: "ext4", Source: "/dev/zd160", Root: "/", MountPoint: "/m/5"},
		{FSType: "btrfs", Source: "/dev/zvol/tank/csi/ab", Root: "/", MountPoint: "/m/6"},
		{FSType: "devtmpfs", Source: "udev", Root: "/zd160", MountPoint: "/m/7"},
		{FSType: "devtmpfs", Source: "udev", Root: "/zd1", MountPoint: "/m/8"},
	} {
		if volume.Shows(mount) || volume.IsDeviceBind(mount) {
			t.Errorf("tank/csi/a (zd16) claims %s from %s root %s", mount.FSType, mount.Source, mount.Root)
		}
	}
}

func TestMountAtFindsTheTopmostOfStackedMounts(t *testing.T) {
	lower := MountInfo{ID: 40, ParentID: 1, MountPoint: "/a", Source: "lower"}
	upper := MountInfo{ID: 50, ParentID: 40, MountPoint: "/a", Source: "upper"}
	top := MountInfo{ID: 60, ParentID: 50, MountPoint: "/a", Source: "top"}
	other := MountInfo{ID: 70, ParentID: 60, MountPoint: "/a/b", Source: "other"}
	for _, order := range [][]MountInfo{{lower, upper, top, other}, {top, upper, lower, other}, {lower, top, other, upper}} {
		if got := MountAt(order, "/a"); got == nil || got.Source != "top" {
			t.Errorf("in %v got %+v", order, got)
		}
	}
	mounts := []MountInfo{lower}
	if MountAt(mounts, "/b") != nil {
		t.Error("found a mount where there is none")
	}
}

func TestToolEnvironmentIsInTheCLocale(t *testing.T) {
	env := zfs.CLocaleEnv([]string{"PATH=/bin", "LANG=de_DE.UTF-8", "LC_MESSAGES=fr_FR", "LANGUAGE=de", "HOME=/root"})
	if !reflect.DeepEqual(env, []string{"PATH=/bin", "HOME=/root", "LC_ALL=C"}) {
		t.Errorf("got %v", env)
	}
}
