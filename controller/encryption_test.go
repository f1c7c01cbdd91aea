package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/rules"
)

const passphrase = "correct horse battery staple"

func encrypted(req *csi.CreateVolumeRequest, secrets map[string]string) *csi.CreateVolumeRequest {
	req.Parameters = map[string]string{ParamEncryption: "aes-256-gcm"}
	req.Secrets = secrets
	return req
}

func TestEncryptedVolumesTakeTheirKeyFromTheSecretsOnly(t *testing.T) {
	h := newHarness(t)
	var errs []error
	create := func(req *csi.CreateVolumeRequest) (*csi.Volume, error) {
		response, err := h.server.CreateVolume(context.Background(), req)
		if err != nil {
			errs = append(errs, err)
		}
		return response.GetVolume(), err
	}
	h.fake.ResetCalls()
	fs, err := create(encrypted(createRequest("fs", 1<<30, mountCapability("")), map[string]string{rules.SecretPassphrase: passphrase}))
	if err != nil {
		t.Fatal(err)
	}
	if calls := h.fake.TotalCalls(); calls != 1 {
		t.Errorf("an encrypted CreateVolume ran %d commands, want 1: %v", calls, h.fake.Calls())
	}
	dataset := datasetOf(t, fs.GetVolumeId())
	if string(h.fake.Key(dataset)) != passphrase {
		t.Errorf("the dataset's key is %q", h.fake.Key(dataset))
	}
	hexKey := strings.Repeat("0f", 32)
	zvol, err := create(encrypted(createRequest("blk", 1<<30, blockCapability()), map[string]string{rules.SecretHexKey: hexKey}))
	if err != nil || string(h.fake.Key(datasetOf(t, zvol.GetVolumeId()))) != hexKey {
		t.Fatalf("a hex key: %v, %v", zvol, err)
	}

	for _, test := range []struct {
		name    string
		secrets map[string]string
	}{
		{"no key", nil},
		{"a passphrase too short", map[string]string{rules.SecretPassphrase: "short"}},
		{"a hex key that is not", map[string]string{rules.SecretHexKey: "zz-not-hex-zz"}},
		{"both", map[string]string{rules.SecretPassphrase: passphrase, rules.SecretHexKey: hexKey}},
	} {
		if _, err := create(encrypted(createRequest("bad-"+strings.ReplaceAll(test.name, " ", "-"), 1<<30, mountCapability("")), test.secrets)); code(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, want InvalidArgument", test.name, err)
		}
	}

	snapshot := h.snapshot("s", fs.GetVolumeId())
	clone, err := create(fromSnapshot(encrypted(createRequest("restored", 1<<30, mountCapability("")), nil), snapshot.GetSnapshotId()))
	if err != nil || string(h.fake.Key(datasetOf(t, clone.GetVolumeId()))) != passphrase {
		t.Errorf("a restore of an encrypted snapshot must be encrypted with its key, and needs no key itself: %v, %v", clone, err)
	}
	plain := h.create(createRequest("plain", 1<<30, mountCapability("")))
	plainSnapshot := h.snapshot("plain-s", plain.GetVolumeId())
	if _, err := create(fromSnapshot(encrypted(createRequest("not-really", 1<<30, mountCapability("")), nil), plainSnapshot.GetSnapshotId())); code(err) != codes.InvalidArgument {
		t.Errorf("encryption asked of a restore of a plain snapshot: got %v, want InvalidArgument", err)
	}
	copyReq := fromSnapshot(createRequest("copied", 1<<30, mountCapability("")), snapshot.GetSnapshotId())
	copyReq.Parameters = map[string]string{ParamSourceMode: "copy"}
	if _, err := create(copyReq); code(err) != codes.InvalidArgument {
		t.Errorf("a copy of an encrypted snapshot: got %v, want InvalidArgument", err)
	}
	for _, err := range errs {
		if strings.Contains(err.Error(), passphrase) || strings.Contains(err.Error(), hexKey) || strings.Contains(err.Error(), "short") {
			t.Errorf("an error quotes a secret: %v", err)
		}
	}
}
