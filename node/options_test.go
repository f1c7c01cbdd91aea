package node

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseMountFlags(t *testing.T) {
	for _, test := range []struct {
		name    string
		fsType  string
		flags   []string
		want    mountOptions
		problem string // part of the error; "" when the flags are fine
	}{
		{name: "no flags ask for nothing", fsType: "zfs"},
		{name: "per-mount flags are set, their opposites cleared", fsType: "ext4", flags: []string{"nosuid", "rw", "noatime"},
			want: mountOptions{set: []string{"noatime", "nosuid"}, cleared: []string{"ro"}}},
		{name: "comma-separated entries are split and defaults ignored", fsType: "ext4", flags: []string{"noexec,discard", " defaults "},
			want: mountOptions{set: []string{"noexec"}, data: []string{"discard"}}},
		{name: "ext4 options that concern only the volume pass", fsType: "ext4", flags: []string{"data=journal", "commit=30", "errors=remount-ro"},
			want: mountOptions{data: []string{"data=journal", "commit=30", "errors=remount-ro"}}},
		{name: "xfs options that concern only the volume pass", fsType: "xfs", flags: []string{"inode64", "logbsize=256k", "prjquota"},
			want: mountOptions{data: []string{"inode64", "logbsize=256k", "prjquota"}}},
		{name: "btrfs options that concern only the volume pass", fsType: "btrfs", flags: []string{"compress=zstd:3", "ssd", "discard=async"},
			want: mountOptions{data: []string{"compress=zstd:3", "ssd", "discard=async"}}},
		{name: "errors=panic would let a job panic the host", fsType: "ext4", flags: []string{"errors=panic"}, problem: `"errors=panic"`},
		{name: "an ext4 journal on another device is refused", fsType: "ext4", flags: []string{"journal_path=/dev/sda"}, problem: `"journal_path=/dev/sda"`},
		{name: "an ext4 journal by device number is refused", fsType: "ext4", flags: []string{"journal_dev=2049"}, problem: `"journal_dev=2049"`},
		{name: "ext4 without journal recovery is refused", fsType: "ext4", flags: []string{"norecovery"}, problem: `"norecovery"`},
		{name: "an xfs log on another device is refused", fsType: "xfs", flags: []string{"logdev=/dev/sdb"}, problem: `"logdev=/dev/sdb"`},
		{name: "an xfs realtime device is refused", fsType: "xfs", flags: []string{"rtdev=/dev/sdb"}, problem: `"rtdev=/dev/sdb"`},
		{name: "another btrfs device is refused", fsType: "btrfs", flags: []string{"device=/dev/sdc"}, problem: `"device=/dev/sdc"`},
		{name: "btrfs fatal_errors=panic is refused", fsType: "btrfs", flags: []string{"fatal_errors=panic"}, problem: `"fatal_errors=panic"`},
		{name: "an option the driver does not know is refused", fsType: "ext4", flags: []string{"bogus=1"}, problem: `"bogus=1"`},
		{name: "a numeric option with another value is refused", fsType: "ext4", flags: []string{"commit=soon"}, problem: `"commit=soon"`},
		{name: "an option of another filesystem is refused", fsType: "xfs", flags: []string{"data=journal"}, problem: `"data=journal"`},
		{name: "suid is refused: every volume is mounted nosuid", fsType: "zfs", flags: []string{"suid"}, problem: "nosuid,nodev"},
		{name: "dev is refused: every volume is mounted nodev", fsType: "ext4", flags: []string{"dev"}, problem: "nosuid,nodev"},
		{name: "ZFS takes its xattr options", fsType: "zfs", flags: []string{"noxattr"}, want: mountOptions{data: []string{"noxattr"}}},
		{name: "ZFS would silently ignore other options, so they are refused", fsType: "zfs", flags: []string{"discard"}, problem: "ZFS dataset"},
		{name: "bind is the driver's to decide", fsType: "ext4", flags: []string{"bind"}, problem: "cannot be honoured"},
		{name: "fstab words mean nothing to mount(2)", fsType: "xfs", flags: []string{"nofail"}, problem: "fstab"},
		{name: "userspace options are refused", fsType: "ext4", flags: []string{"x-systemd.automount"}, problem: "userspace"},
		{name: "ro and rw together contradict each other", fsType: "zfs", flags: []string{"ro", "rw"}, problem: "contradict"},
		{name: "two atime policies contradict each other", fsType: "zfs", flags: []string{"noatime", "strictatime"}, problem: "more than one"},
	} {
		t.Run(test.name, func(t *testing.T) {
			got, err := parseMountFlags(test.fsType, test.flags)
			if test.problem != "" {
				if err == nil || !strings.Contains(err.Error(), test.problem) {
					t.Fatalf("got %v, %v; want an error about %q", got, err, test.problem)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, test.want) {
				t.Errorf("got %+v, %v; want %+v", got, err, test.want)
			}
		})
	}
}

func TestMountOptionsMismatch(t *testing.T) {
	mount := MountInfo{Options: []string{"rw", "nosuid", "noatime"}}
	for _, test := range []struct {
		name    string
		options mountOptions
		differs bool
	}{
		{"a mount with the flags asked for matches", mountOptions{set: []string{"nosuid"}}, false},
		{"flags nobody asked for do not matter", mountOptions{}, false},
		{"a flag the mount lacks differs", mountOptions{set: []string{"noexec"}}, true},
		{"read-only differs from read-write", mountOptions{set: []string{"ro"}}, true},
		{"a flag asked off that the mount has differs", mountOptions{cleared: []string{"nosuid"}}, true},
		{"strictatime differs from noatime", mountOptions{set: []string{"strictatime"}}, true},
	} {
		t.Run(test.name, func(t *testing.T) {
			if problem := test.options.mismatch(mount); (problem != "") != test.differs {
				t.Errorf("mismatch = %q", problem)
			}
		})
	}
}
