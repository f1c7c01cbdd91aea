//go:build e2e

package tests

import (
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// NodeStageVolume reads its volume with zfs.Exec.Inspect: the ioctl zfs
// itself uses (ZFS_IOC_OBJSET_STATS), decoded in-process, and zfs list only
// when that read cannot answer for certain. Here, for datasets made with
// real zfs commands, the ioctl's read must be zfs list's field for field
// (zfs.InspectedFields), without a command; and where zfs list refuses, the
// ioctl must not answer either.
func TestInspectReadsWhatZFSListReads(t *testing.T) {
	parent := testParent(t)
	names := rules.NewUserProps("zfs.csi.dev")
	props := append(names.All(), "e2e:inherited", "e2e:dash")
	mark := "-o" + names.Managed + "=true"

	mustRun(t, "zfs", "create", "-o", "mountpoint=legacy", mark, "-o", names.FSType+"=zfs", parent+"/fs")
	mustRun(t, "zfs", "set", "e2e:dash=-", parent+"/fs")
	mustRun(t, "zfs", "snapshot", parent+"/fs@snap")
	mustRun(t, "zfs", "clone", "-o", "mountpoint=legacy", parent+"/fs@snap", parent+"/clone")
	mustRun(t, "zfs", "create", "-s", "-V", "64M", mark, "-o", names.FSType+"=ext4", parent+"/zvol")
	mustRun(t, "zfs", "create", "-o", "mountpoint=legacy", mark, "-o", names.Deleted+"=true", parent+"/deleted")
	mustRun(t, "zfs", "create", "-o", "mountpoint=legacy", "-o", "e2e:inherited=from-parent", parent+"/family")
	mustRun(t, "zfs", "create", "-o", "mountpoint=legacy", mark, parent+"/family/child")
	mustRun(t, "zfs", "create", "-o", "mountpoint=legacy", mark, "-o", "e2e:inherited=with\ttab", parent+"/tab")
	for _, encrypted := range []string{"loaded", "unloaded"} {
		root := parent + "/enc-" + encrypted
		if _, stderr, code := zfsWithKey(t, e2ePassphrase, "create", "-o", "mountpoint=legacy", "-o", "encryption=on",
			"-o", "keyformat=passphrase", "-o", "keylocation=prompt", mark, root); code != 0 {
			t.Fatalf("zfs create %s: exit %d: %s", root, code, stderr)
		}
		mustRun(t, "zfs", "create", "-s", "-V", "64M", mark, root+"/zvol")
		mustRun(t, "zfs", "snapshot", root+"@snap")
		mustRun(t, "zfs", "clone", "-o", "mountpoint=legacy", root+"@snap", parent+"/enc-clone-"+encrypted)
	}
	reboot(t, parent+"/enc-unloaded")

	var commands atomic.Int32
	z := zfs.NewExec(zfs.ExecConfig{OnCommand: func(string, time.Duration, error) { commands.Add(1) }})
	for _, test := range []struct {
		what, name string
		refused    bool // zfs list refuses the row: the ioctl must not answer it
	}{
		{"a filesystem (a user property set to '-')", "fs", false},
		{"a snapshot", "fs@snap", false},
		{"a clone", "clone", false},
		{"a zvol", "zvol", false},
		{"a volume with the deleted mark", "deleted", false},
		{"a user property inherited from the parent", "family/child", false},
		{"an encrypted dataset, key loaded", "enc-loaded", false},
		{"an encrypted zvol under it (its encryption root the parent)", "enc-loaded/zvol", false},
		{"a snapshot of an encrypted dataset", "enc-loaded@snap", false},
		{"a clone of an encrypted dataset", "enc-clone-loaded", false},
		{"an encrypted dataset, key unloaded", "enc-unloaded", false},
		{"an encrypted zvol, key unloaded", "enc-unloaded/zvol", false},
		{"a clone of an encrypted dataset, key unloaded", "enc-clone-unloaded", false},
		{"a name that does not exist", "missing", false},
		{"a value with a tab, which zfs list -H cannot print", "tab", true},
	} {
		t.Run(test.what, func(t *testing.T) {
			name := parent + "/" + test.name
			listed, listErr := zfs.GetWithKeyStatus(ctx(t), z, name, props)
			commands.Store(0)
			inspected, inspectErr := z.Inspect(ctx(t), name, props)
			fellBack := commands.Load() != 0
			switch {
			case test.refused:
				if listErr == nil || inspectErr == nil || !fellBack {
					t.Fatalf("zfs list: %v; Inspect: %+v, %v (fell back to zfs list: %v); want both refused, by zfs list", listErr, inspected, inspectErr, fellBack)
				}
				return
			case fellBack:
				t.Errorf("Inspect ran %d zfs commands: the ioctl did not answer", commands.Load())
			}
			if errors.Is(listErr, zfs.ErrNotFound) && errors.Is(inspectErr, zfs.ErrNotFound) {
				return
			}
			if listErr != nil || inspectErr != nil {
				t.Fatalf("zfs list: %v; Inspect: %v", listErr, inspectErr)
			}
			for _, problem := range inspectDifferences(zfs.Inspected(listed), inspected) {
				t.Error(problem)
			}
			t.Logf("%s: %+v", name, inspected)
		})
	}
}

// inspectDifferences names each of zfs.InspectedFields in which the
// ioctl's read differs from zfs list's.
func inspectDifferences(listed, inspected zfs.Dataset) []string {
	var problems []string
	field := func(name string, list, ioctl any) {
		if fmt.Sprint(list) != fmt.Sprint(ioctl) {
			problems = append(problems, fmt.Sprintf("%s: zfs list %q, the ioctl %q", name, list, ioctl))
		}
	}
	field("Name", listed.Name, inspected.Name)
	field("Type", listed.Type, inspected.Type)
	field("Origin", listed.Origin, inspected.Origin)
	field("KeyStatus", listed.KeyStatus, inspected.KeyStatus)
	field("EncryptionRoot", listed.EncryptionRoot, inspected.EncryptionRoot)
	if !maps.Equal(listed.User, inspected.User) {
		problems = append(problems, fmt.Sprintf("User: zfs list %q, the ioctl %q", listed.User, inspected.User))
	}
	if want := zfs.Inspected(inspected); fmt.Sprint(want) != fmt.Sprint(inspected) {
		problems = append(problems, fmt.Sprintf("the ioctl filled more than zfs.InspectedFields: %+v", inspected))
	}
	return problems
}
