package zfstest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// The Fake's encryption must be OpenZFS 2.3's, or no test of staging could
// see what a reboot does to a restore: keys load at the encryption root
// only, and everything sharing a root is available or not together.
//
// long: one tree of encrypted datasets, each step recorded from real ZFS
func TestEncryptionRootsAndKeyStatusAreZFSs(t *testing.T) {
	ctx := context.Background()
	const passphrase, operatorKey = "correct horse battery staple", "the operator's own passphrase"
	f := NewFake(map[string]uint64{"tank": 1 << 40})
	encrypted := func(key string) zfs.CreateOptions {
		return zfs.CreateOptions{Key: []byte(key), Properties: map[string]string{
			"encryption": "aes-256-gcm", "keyformat": "passphrase", "keylocation": "prompt"}}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.Create(ctx, "tank/csi", zfs.CreateOptions{}))
	must(f.Create(ctx, "tank/csi/origin", encrypted(passphrase)))
	must(f.Snapshot(ctx, "tank/csi/origin@snap", nil))
	must(f.Clone(ctx, "tank/csi/origin@snap", "tank/csi/restore", nil))
	must(f.Snapshot(ctx, "tank/csi/restore@again", nil))
	must(f.Clone(ctx, "tank/csi/restore@again", "tank/csi/restore-of-restore", nil))
	must(f.Create(ctx, "tank/locked", encrypted(operatorKey)))
	must(f.Create(ctx, "tank/locked/csi", zfs.CreateOptions{}))
	must(f.Create(ctx, "tank/locked/csi/inherits", zfs.CreateOptions{}))

	crypto := func(name string) (root, status string) {
		t.Helper()
		rows, err := f.List(ctx, zfs.ListOptions{Roots: []string{name}, Types: []zfs.Type{zfs.Filesystem, zfs.Snapshot}, Crypto: true})
		if err != nil || len(rows) != 1 {
			t.Fatalf("list %s: %v %v", name, rows, err)
		}
		return rows[0].EncryptionRoot, rows[0].KeyStatus
	}
	wantAll := func(status string, root string, names ...string) {
		t.Helper()
		for _, name := range names {
			if gotRoot, gotStatus := crypto(name); gotRoot != root || gotStatus != status {
				t.Errorf("%s: encryptionroot %q keystatus %q, want %q %q", name, gotRoot, gotStatus, root, status)
			}
		}
	}
	shared := []string{"tank/csi/origin", "tank/csi/origin@snap", "tank/csi/restore", "tank/csi/restore@again", "tank/csi/restore-of-restore"}
	wantAll("available", "tank/csi/origin", shared...)
	wantAll("available", "tank/locked", "tank/locked", "tank/locked/csi/inherits")
	wantAll("", "", "tank/csi")

	var commandErr *zfs.CommandError
	if err := f.UnloadKey("tank/csi/restore"); !errors.Is(err, zfs.ErrNotEncryptionRoot) {
		t.Errorf("unload-key of a clone: got %v, want ErrNotEncryptionRoot", err)
	}
	f.SetBusy("tank/csi/restore", true) // mounted
	if err := f.UnloadKey("tank/csi/origin"); !errors.Is(err, zfs.ErrBusy) {
		t.Errorf("unload-key while a clone sharing the key is mounted: got %v, want ErrBusy", err)
	}
	f.SetBusy("tank/csi/restore", false)
	must(f.UnloadKey("tank/csi/origin"))
	wantAll("unavailable", "tank/csi/origin", shared...)
	wantAll("available", "tank/locked", "tank/locked/csi/inherits")

	err := f.LoadKey(ctx, "tank/csi/restore", []byte(passphrase))
	if !errors.Is(err, zfs.ErrNotEncryptionRoot) || !errors.As(err, &commandErr) || commandErr.ExitCode != 255 ||
		commandErr.Stderr != "Key load error: Keys must be loaded for encryption root of 'tank/csi/restore' (tank/csi/origin).\n" {
		t.Fatalf("load-key of a restore: got %#v, want what OpenZFS 2.3 says", err)
	}
	if err := f.VerifyKey(ctx, "tank/csi/restore-of-restore", []byte(passphrase)); !errors.Is(err, zfs.ErrNotEncryptionRoot) {
		t.Errorf("load-key -n of a restore: got %v, want ErrNotEncryptionRoot", err)
	}
	if err := f.LoadKey(ctx, "tank/csi", []byte(passphrase)); !errors.Is(err, zfs.ErrInvalid) ||
		!strings.Contains(err.Error(), "'tank/csi' is not encrypted") {
		t.Errorf("load-key of an unencrypted dataset: got %v", err)
	}
	if err := f.VerifyKey(ctx, "tank/csi/origin", []byte("a wrong passphrase")); !errors.Is(err, zfs.ErrKeyRejected) {
		t.Errorf("load-key -n with a wrong key: got %v, want ErrKeyRejected", err)
	}
	must(f.VerifyKey(ctx, "tank/csi/origin", []byte(passphrase)))
	wantAll("unavailable", "tank/csi/origin", shared...) // -n loads nothing
	if err := f.LoadKey(ctx, "tank/csi/origin", []byte("a wrong passphrase")); !errors.Is(err, zfs.ErrKeyRejected) {
		t.Errorf("load-key with a wrong key: got %v, want ErrKeyRejected", err)
	}
	must(f.LoadKey(ctx, "tank/csi/origin", []byte(passphrase)))
	wantAll("available", "tank/csi/origin", shared...)

	// With the key loaded, plain load-key does not look at the key it is
	// given (zfs says "Key already loaded" first); -n still checks it.
	if err := f.LoadKey(ctx, "tank/csi/origin", []byte("a wrong passphrase")); !errors.Is(err, zfs.ErrKeyLoaded) {
		t.Errorf("load-key of a loaded key: got %v, want ErrKeyLoaded", err)
	}
	if err := f.VerifyKey(ctx, "tank/csi/origin", []byte("a wrong passphrase")); !errors.Is(err, zfs.ErrKeyRejected) {
		t.Errorf("load-key -n of a loaded key with a wrong key: got %v, want ErrKeyRejected", err)
	}
	must(f.VerifyKey(ctx, "tank/csi/origin", []byte(passphrase)))
}
