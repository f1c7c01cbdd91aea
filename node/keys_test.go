package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

const (
	volumeKey   = "correct horse battery staple"
	operatorKey = "the operator's own passphrase"
)

// encrypted makes an encryption root keyed with key: what CreateVolume's
// encryption parameter makes when managed (a volume of ours), else an
// operator's encrypted dataset.
func (h *harness) encrypted(dataset, key string, managed bool) {
	h.t.Helper()
	properties := map[string]string{"mountpoint": "legacy",
		"encryption": "aes-256-gcm", "keyformat": "passphrase", "keylocation": "prompt"}
	if managed {
		properties[h.props.Managed] = "true"
	}
	if err := h.zfs.Create(context.Background(), dataset, zfs.CreateOptions{Key: []byte(key), Properties: properties}); err != nil {
		h.t.Fatal(err)
	}
}

// datasetVolume is a dataset volume's request shape, made by make.
func (h *harness) datasetVolume(dataset string, make func(dataset string) error) *testVolume {
	h.t.Helper()
	name := filepath.Base(dataset)
	v := &testVolume{id: rules.VolumeID(testNode, dataset), dataset: dataset, fsType: "zfs",
		capability: mountCapability("", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
		context:    map[string]string{rules.ContextKind: rules.KindDataset, rules.ContextFSType: "zfs"},
		staging:    filepath.Join(h.dir, name, "staging"), target: filepath.Join(h.dir, name, "target")}
	if err := make(dataset); err != nil {
		h.t.Fatal(err)
	}
	if err := os.MkdirAll(v.staging, 0o750); err != nil {
		h.t.Fatal(err)
	}
	return v
}

// cloneOf is a volume the controller made from snapshot (a restore, or a
// clone of a volume through its internal snapshot).
func (h *harness) cloneOf(snapshot, dataset string) *testVolume {
	return h.datasetVolume(dataset, func(dataset string) error {
		return h.zfs.Clone(context.Background(), snapshot, dataset, map[string]string{
			h.props.Managed: "true", h.props.CSIName: filepath.Base(dataset), "mountpoint": "legacy"})
	})
}

func (h *harness) stageWith(v *testVolume, secrets map[string]string) error {
	req := h.stageRequest(v)
	req.Secrets = secrets
	_, err := h.server.NodeStageVolume(context.Background(), req)
	return err
}

func (h *harness) keyStatus(dataset string) string {
	h.t.Helper()
	row, err := zfs.GetWithKeyStatus(context.Background(), h.zfs, dataset, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return row.KeyStatus
}

func (h *harness) keyCommands() int {
	calls := h.zfs.Calls()
	return calls["LoadKey"] + calls["VerifyKey"]
}

func passphrase(key string) map[string]string { return map[string]string{rules.SecretPassphrase: key} }

// After a reboot no key is loaded, and ZFS loads a clone's only at its
// encryption root, its origin: staging a restore must load it there.
func TestStageLoadsTheKeyOfARestoreAtItsEncryptionRoot(t *testing.T) {
	for _, test := range []struct {
		name          string
		snapshotProps func(rules.UserProps) map[string]string
		originDeleted bool
	}{
		{"a restore of a snapshot", func(p rules.UserProps) map[string]string { return map[string]string{p.SnapshotName: "snap-1"} }, false},
		{"a clone of a volume", func(p rules.UserProps) map[string]string { return map[string]string{p.Internal: "true"} }, false},
		{"a restore whose origin volume was deleted and is held by it",
			func(p rules.UserProps) map[string]string { return map[string]string{p.SnapshotName: "snap-1"} }, true},
	} {
		t.Run(test.name, func(t *testing.T) {
			ctx := context.Background()
			h := newHarness(t)
			const origin, snapshot = "tank/csi/origin", "tank/csi/origin@snap-1"
			h.encrypted(origin, volumeKey, true)
			if err := h.zfs.Snapshot(ctx, snapshot, test.snapshotProps(h.props)); err != nil {
				t.Fatal(err)
			}
			restore := h.cloneOf(snapshot, "tank/csi/restore")
			if test.originDeleted { // as DeleteVolume marks a volume its clones still need
				if err := h.zfs.Set(ctx, origin, map[string]string{h.props.Deleted: "true", "readonly": "on"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.zfs.UnloadKey(origin); err != nil { // a reboot
				t.Fatal(err)
			}

			err := h.stageWith(restore, nil)
			wantCode(t, err, codes.FailedPrecondition)
			if !strings.Contains(err.Error(), "zfs load-key "+origin) {
				t.Errorf("the refusal does not name the encryption root to load by hand: %v", err)
			}
			wantCode(t, h.stageWith(restore, passphrase("not the passphrase")), codes.InvalidArgument)
			if len(h.host.MountTable()) != 0 || h.keyStatus(origin) != "unavailable" {
				t.Fatalf("a wrong key changed something: %v, keystatus %s", h.host.MountTable(), h.keyStatus(origin))
			}
			h.zfs.ResetCalls()
			if err := h.stageWith(restore, passphrase(volumeKey)); err != nil {
				t.Fatalf("staging the restore with its key: %v", err)
			}
			if calls := h.zfs.Calls(); calls["LoadKey"] != 1 || calls["Inspect"] != 2 || h.zfs.TotalCalls() != 3 {
				t.Errorf("calls %v, want the volume's and the root's read (Inspect) and one load-key", calls)
			}
			if mount := h.mountAt(restore.staging); mount == nil || mount.Source != restore.dataset {
				t.Errorf("not staged: %v", h.host.MountTable())
			}
			for _, dataset := range []string{origin, restore.dataset} {
				if status := h.keyStatus(dataset); status != "available" {
					t.Errorf("%s: keystatus %s after staging", dataset, status)
				}
			}
		})
	}
}

// withParent makes the node serve a second parent dataset as well.
func (h *harness) withParent(parent string) {
	h.cfg.ParentDatasets = append(h.cfg.ParentDatasets, parent)
	h.server = node.New(h.cfg, h.zfs, h.host, zerolog.Nop(), h.opts)
}

// A key at a root that is not a volume of ours is the operator's: the node
// never offers it a secret (nor loads it), and says how to load it by hand.
func TestStageLeavesAnEncryptionRootNotOursToTheOperator(t *testing.T) {
	ctx := context.Background()
	for _, test := range []struct {
		name, root string
		volume     func(h *harness) *testVolume
	}{
		{"a volume under a parent the operator encrypted", "tank/locked", func(h *harness) *testVolume {
			h.encrypted("tank/locked", operatorKey, false)
			if err := h.zfs.Create(ctx, "tank/locked/csi", zfs.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			h.withParent("tank/locked/csi")
			return h.datasetVolume("tank/locked/csi/vol", func(dataset string) error {
				return h.zfs.Create(ctx, dataset, zfs.CreateOptions{Properties: map[string]string{h.props.Managed: "true", "mountpoint": "legacy"}})
			})
		}},
		{"a restore of a marked volume outside the parents", "tank/elsewhere/origin", func(h *harness) *testVolume {
			if err := h.zfs.Create(ctx, "tank/elsewhere", zfs.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			h.encrypted("tank/elsewhere/origin", operatorKey, true)
			if err := h.zfs.Snapshot(ctx, "tank/elsewhere/origin@snap", nil); err != nil {
				t.Fatal(err)
			}
			return h.cloneOf("tank/elsewhere/origin@snap", "tank/csi/restore")
		}},
	} {
		t.Run(test.name, func(t *testing.T) {
			h := newHarness(t)
			v := test.volume(h)
			if err := h.zfs.UnloadKey(test.root); err != nil {
				t.Fatal(err)
			}
			h.zfs.ResetCalls()
			for _, secrets := range []map[string]string{nil, passphrase(operatorKey)} {
				err := h.stageWith(v, secrets)
				wantCode(t, err, codes.FailedPrecondition)
				if !strings.Contains(err.Error(), "zfs load-key "+test.root) {
					t.Errorf("the refusal does not say to load %s by hand: %v", test.root, err)
				}
			}
			if h.keyCommands() != 0 || len(h.host.MountTable()) != 0 || h.keyStatus(test.root) != "unavailable" {
				t.Fatalf("calls %v, mounts %v: the operator's key was touched", h.zfs.Calls(), h.host.MountTable())
			}
			if err := h.zfs.LoadKey(ctx, test.root, []byte(operatorKey)); err != nil { // by hand
				t.Fatal(err)
			}
			h.zfs.ResetCalls()
			if err := h.stageWith(v, passphrase("any other passphrase")); err != nil {
				t.Fatalf("with the operator's key loaded: %v", err)
			}
			if h.keyCommands() != 0 {
				t.Errorf("calls %v: a secret was tried against the operator's key", h.zfs.Calls())
			}
		})
	}
}

// A loaded key opens the volume to anyone who stages it, so secrets given
// at stage are checked (zfs load-key -n): a second volume specification
// naming the same volume ID with another key must not get the data.
func TestStageChecksTheSecretsOfAVolumeWhoseKeyIsLoaded(t *testing.T) {
	h := newHarness(t)
	const origin = "tank/csi/origin"
	h.encrypted(origin, volumeKey, true)
	volume := h.datasetVolume(origin, func(string) error { return nil })
	if err := h.zfs.Snapshot(context.Background(), origin+"@snap-1", nil); err != nil {
		t.Fatal(err)
	}
	restore := h.cloneOf(origin+"@snap-1", "tank/csi/restore")
	for _, v := range []*testVolume{volume, restore} {
		h.zfs.ResetCalls()
		err := h.stageWith(v, passphrase("not the passphrase"))
		wantCode(t, err, codes.InvalidArgument)
		if !strings.Contains(err.Error(), "the key in the node-stage secrets does not open it") {
			t.Errorf("%s: %v", v.dataset, err)
		}
		if h.mountAt(v.staging) != nil || h.zfs.Calls()["VerifyKey"] != 1 || h.zfs.Calls()["LoadKey"] != 0 {
			t.Fatalf("%s: mounts %v, calls %v; want nothing mounted after one load-key -n", v.dataset, h.host.MountTable(), h.zfs.Calls())
		}
		if err := h.stageWith(v, passphrase(volumeKey)); err != nil {
			t.Fatalf("%s with its key: %v", v.dataset, err)
		}
		if h.mountAt(v.staging) == nil {
			t.Errorf("%s: not staged", v.dataset)
		}
	}

	// The same volume ID from a second specification: another staging path.
	second := *restore
	second.staging = filepath.Join(h.dir, "second", "staging")
	if err := os.MkdirAll(second.staging, 0o750); err != nil {
		t.Fatal(err)
	}
	wantCode(t, h.stageWith(&second, passphrase("the attacker's guess")), codes.InvalidArgument)
	if h.mountAt(second.staging) != nil {
		t.Errorf("a wrong key got the volume staged at %s", second.staging)
	}
	// No secrets, key loaded: nothing to check against; staging goes on
	// (the choice written down in loadKey).
	h.zfs.ResetCalls()
	if err := h.stageWith(&second, nil); err != nil {
		t.Fatal(err)
	}
	if h.keyCommands() != 0 || h.zfs.Calls()["Inspect"] != 1 || h.zfs.TotalCalls() != 1 {
		t.Errorf("calls %v, want the one read of the volume (Inspect)", h.zfs.Calls())
	}
}

// A key loaded after the listing (a volume sharing the root staged at the
// same moment) makes zfs load-key answer "Key already loaded" without
// reading the key given: that key must still be checked.
func TestStageChecksAKeyLoadedByAConcurrentStage(t *testing.T) {
	h := newHarness(t)
	const dataset = "tank/csi/secret"
	h.encrypted(dataset, volumeKey, true)
	v := h.datasetVolume(dataset, func(string) error { return nil })
	if err := h.zfs.UnloadKey(dataset); err != nil {
		t.Fatal(err)
	}
	loadedMeanwhile := &zfs.CommandError{Argv: []string{"zfs", "load-key", dataset}, ExitCode: 255, Kind: zfs.ErrKeyLoaded,
		Stderr: "Key load error: Key already loaded for '" + dataset + "'.\n"}
	h.zfs.FailNext("LoadKey", loadedMeanwhile)
	wantCode(t, h.stageWith(v, passphrase("not the passphrase")), codes.InvalidArgument)
	if calls := h.zfs.Calls(); calls["VerifyKey"] != 1 || h.mountAt(v.staging) != nil {
		t.Fatalf("calls %v, mounts %v: the key given was not checked", calls, h.host.MountTable())
	}
	h.zfs.FailNext("LoadKey", loadedMeanwhile)
	if err := h.stageWith(v, passphrase(volumeKey)); err != nil {
		t.Fatalf("with the key: %v", err)
	}
}

// zfs reads a key as one line: a passphrase with a line break or NUL would
// make two different secrets open the same volume.
func TestStageRefusesKeysWithLineBreaks(t *testing.T) {
	h := newHarness(t)
	const dataset = "tank/csi/secret"
	h.encrypted(dataset, volumeKey, true)
	v := h.datasetVolume(dataset, func(string) error { return nil })
	for _, loaded := range []bool{true, false} {
		if !loaded {
			if err := h.zfs.UnloadKey(dataset); err != nil {
				t.Fatal(err)
			}
		}
		for _, key := range []string{volumeKey + "\nsomething else", volumeKey + "\r", volumeKey + "\x00more", "\n" + volumeKey} {
			h.zfs.ResetCalls()
			err := h.stageWith(v, passphrase(key))
			wantCode(t, err, codes.InvalidArgument)
			if strings.Contains(err.Error(), volumeKey) {
				t.Errorf("the refusal quotes the secret: %v", err)
			}
			if h.keyCommands() != 0 || len(h.host.MountTable()) != 0 {
				t.Fatalf("key loaded %v, %q: calls %v, mounts %v; want refused before zfs", loaded, key, h.zfs.Calls(), h.host.MountTable())
			}
		}
	}
}
