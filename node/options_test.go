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
		{name: "ext4 options go to the kernel, which judges them", fsType: "ext4", flags: []string{"data=journal", "commit=30"},
			want: mountOptions{data: []string{"data=journal", "commit=30"}}},
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
