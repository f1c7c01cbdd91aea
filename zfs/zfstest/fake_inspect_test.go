package zfstest

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// The Fake's Inspect answers what zfs list does for the fields Exec's
// Inspect reads (the same cases e2e/tests TestInspectReadsWhatZFSListReads
// checks on real ZFS), leaves the others zero, and refuses what List refuses.
func TestInspectOfTheFakeIsItsListingsIdentity(t *testing.T) {
	ctx := context.Background()
	f := NewFake(map[string]uint64{"tank": 1 << 40})
	managed := map[string]string{"zfs.csi.dev:managed": "true"}
	encrypted := zfs.CreateOptions{Key: []byte("a passphrase of ours"), Properties: map[string]string{
		"encryption": "aes-256-gcm", "keyformat": "passphrase", "keylocation": "prompt", "zfs.csi.dev:managed": "true"}}
	for _, step := range []error{
		f.Create(ctx, "tank/csi", zfs.CreateOptions{Properties: map[string]string{"e2e:inherited": "from-parent"}}),
		f.Create(ctx, "tank/csi/fs", zfs.CreateOptions{Properties: map[string]string{"zfs.csi.dev:managed": "true", "e2e:dash": "-"}}),
		f.Snapshot(ctx, "tank/csi/fs@snap", nil),
		f.Clone(ctx, "tank/csi/fs@snap", "tank/csi/clone", managed),
		f.Create(ctx, "tank/csi/zvol", zfs.CreateOptions{VolSize: 1 << 26, Properties: map[string]string{"zfs.csi.dev:fstype": "ext4"}}),
		f.Create(ctx, "tank/csi/deleted", zfs.CreateOptions{Properties: map[string]string{"zfs.csi.dev:managed": "true", "zfs.csi.dev:deleted": "true"}}),
		f.Create(ctx, "tank/csi/enc", encrypted),
		f.Create(ctx, "tank/csi/enc/zvol", zfs.CreateOptions{VolSize: 1 << 26}),
		f.Snapshot(ctx, "tank/csi/enc@snap", nil),
		f.Clone(ctx, "tank/csi/enc@snap", "tank/csi/enc-clone", nil),
		f.Create(ctx, "tank/csi/tab", zfs.CreateOptions{Properties: map[string]string{"e2e:inherited": "with\ttab"}}),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	props := []string{"zfs.csi.dev:managed", "zfs.csi.dev:deleted", "zfs.csi.dev:fstype", "e2e:inherited", "e2e:dash"}
	compare := func(name string) {
		t.Helper()
		listed, listErr := f.List(ctx, zfs.ListOptions{Roots: []string{name}, Types: []zfs.Type{zfs.Filesystem, zfs.Volume, zfs.Snapshot},
			UserProps: props, Crypto: true})
		inspected, inspectErr := f.Inspect(ctx, name, props)
		switch {
		case listErr != nil || inspectErr != nil:
			if listErr == nil || inspectErr == nil || errors.Is(listErr, zfs.ErrNotFound) != errors.Is(inspectErr, zfs.ErrNotFound) {
				t.Errorf("%s: List %v, Inspect %v", name, listErr, inspectErr)
			}
			return
		case len(listed) != 1:
			t.Fatalf("%s: listed %v", name, listed)
		}
		row := listed[0]
		want := zfs.Dataset{Name: row.Name, Type: row.Type, Origin: row.Origin, KeyStatus: row.KeyStatus, EncryptionRoot: row.EncryptionRoot, User: row.User}
		if !reflect.DeepEqual(inspected, want) {
			t.Errorf("%s: Inspect %+v, want %+v", name, inspected, want)
		}
	}
	for _, name := range []string{"tank/csi/fs", "tank/csi/fs@snap", "tank/csi/clone", "tank/csi/zvol", "tank/csi/deleted",
		"tank/csi/enc", "tank/csi/enc/zvol", "tank/csi/enc@snap", "tank/csi/enc-clone", "tank/csi/missing", "tank/csi/tab"} {
		compare(name)
	}
	if err := f.UnloadKey("tank/csi/enc"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tank/csi/enc", "tank/csi/enc/zvol", "tank/csi/enc-clone"} {
		compare(name)
	}
	if row, _ := f.Inspect(ctx, "tank/csi/enc-clone", props); row.KeyStatus != "unavailable" || row.EncryptionRoot != "tank/csi/enc" ||
		row.Origin != "tank/csi/enc@snap" || row.Type != zfs.Filesystem || row.User["e2e:inherited"] != "from-parent" || row.Used != 0 {
		t.Errorf("the unloaded clone: %+v", row)
	}
	f.SetPoolHealth("tank", "SUSPENDED")
	if _, err := f.Inspect(ctx, "tank/csi/fs", props); !errors.Is(err, zfs.ErrPoolSuspended) {
		t.Errorf("Inspect on a suspended pool: %v", err)
	}
	if calls := f.Calls(); calls["Inspect"] != 16 {
		t.Errorf("calls %v, want 16 of Inspect", calls)
	}
}
