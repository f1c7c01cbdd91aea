package node_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

func TestStageLoadsAnEncryptedVolumesKeyFromTheSecrets(t *testing.T) {
	h := newHarness(t)
	const passphrase = "correct horse battery staple"
	v := h.volume("plain", "zfs") // for its paths and request shape
	v.dataset, v.id = "tank/csi/secret", rules.VolumeID(testNode, "tank/csi/secret")
	if err := h.zfs.Create(context.Background(), v.dataset, zfs.CreateOptions{Key: []byte(passphrase), Properties: map[string]string{
		h.props.Managed: "true", "mountpoint": "legacy", "encryption": "aes-256-gcm", "keyformat": "passphrase", "keylocation": "prompt"}}); err != nil {
		t.Fatal(err)
	}
	if err := h.zfs.UnloadKey(v.dataset); err != nil { // a reboot
		t.Fatal(err)
	}
	stage := func(secrets map[string]string) error {
		req := h.stageRequest(v)
		req.Secrets = secrets
		_, err := h.server.NodeStageVolume(context.Background(), req)
		return err
	}
	err := stage(nil)
	wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "node-stage secrets") {
		t.Errorf("the refusal does not say where the key comes from: %v", err)
	}
	err = stage(map[string]string{rules.SecretPassphrase: "not the passphrase"})
	wantCode(t, err, codes.InvalidArgument)
	if strings.Contains(err.Error(), "not the passphrase") {
		t.Errorf("the refusal quotes the secret: %v", err)
	}
	if len(h.host.MountTable()) != 0 {
		t.Fatalf("something was mounted without the key: %v", h.host.MountTable())
	}
	h.zfs.ResetCalls()
	if err := stage(map[string]string{rules.SecretPassphrase: passphrase}); err != nil {
		t.Fatal(err)
	}
	if calls := h.zfs.Calls(); calls["LoadKey"] != 1 {
		t.Errorf("calls %v, want one LoadKey", calls)
	}
	if mount := h.mountAt(v.staging); mount == nil || mount.Source != v.dataset {
		t.Errorf("not staged: %v", h.host.MountTable())
	}
	if err := h.unstage(v); err != nil {
		t.Fatal(err)
	}
	h.zfs.ResetCalls()
	if err := stage(nil); err != nil {
		t.Fatalf("with the key loaded, staging needs no secret: %v", err)
	}
	if calls := h.zfs.Calls(); calls["LoadKey"] != 0 || calls["Inspect"] != 1 || h.zfs.TotalCalls() != 1 {
		t.Errorf("calls %v, want the one read of the volume (Inspect)", calls)
	}
}
