//go:build e2e

package tests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
)

// Encrypted data is adopted with its key where the operator chooses. Kept
// (the default): its keylocation stays, and staging waits for the
// operator's zfs load-key. From the CSI secrets (--key-from-secrets):
// keylocation=prompt, and staging loads the key from the node-stage
// secrets, refusing a wrong one before anything mounts. Either way the
// data written before the adoption is read through the published volume.
func TestAnEncryptedDatasetIsAdoptedWithItsKeyWhereTheOperatorChooses(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	outside := operatorDatasets(t)
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(e2ePassphrase+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name        string
		fromSecrets bool
	}{{"kept", false}, {"from-secrets", true}} {
		t.Run(c.name, func(t *testing.T) {
			ds, mountpoint := outside+"/"+c.name, t.TempDir()
			mustRun(t, "zfs", "create", "-o", "encryption=aes-256-gcm", "-o", "keyformat=passphrase", "-o", "keylocation=file://"+keyFile,
				"-o", "refquota=64M", "-o", "mountpoint="+mountpoint, ds)
			mustRun(t, "sh", "-c", `echo secret-rows > "$1/table" && sync`, "sh", mountpoint)
			mustRun(t, "zfs", "unmount", ds)
			volume, err := d.operatorCall(ctx(t), rpc.OperatorAdopt, map[string]any{rpc.AdoptDataset: ds, rpc.AdoptName: "crypt-" + c.name,
				rpc.AdoptMode: "own", rpc.AdoptRename: "true", rpc.AdoptKeyFromSecrets: strconv.FormatBool(c.fromSecrets)})
			if err != nil {
				t.Fatalf("adopting the encrypted dataset: %v", err)
			}
			adopted := datasetOf(t, volume.GetVolumeId())
			wantLocation := "file://" + keyFile
			if c.fromSecrets {
				wantLocation = "prompt"
			}
			if got := zfsGet(t, "keylocation", adopted); got != wantLocation {
				t.Errorf("keylocation after adoption: %s, want %s", got, wantLocation)
			}
			reboot(t, adopted) // no key loaded, as after a reboot
			v := d.nodeVolumeOf(volume, mountCap(""))
			if c.fromSecrets {
				wrong := map[string]string{rules.SecretPassphrase: "not-the-passphrase-at-all"}
				if err := d.stageWith(v, v.staging, wrong); status.Code(err) != codes.InvalidArgument {
					t.Errorf("staging with a wrong passphrase: %v, want INVALID_ARGUMENT", err)
				}
				if out := run(t, "findmnt", "-n", v.staging); out != "" || zfsGet(t, "keystatus", adopted) != "unavailable" {
					t.Errorf("a wrong key mounted %q or loaded the key (%s)", out, zfsGet(t, "keystatus", adopted))
				}
				if err := d.stageWith(v, v.staging, map[string]string{rules.SecretPassphrase: e2ePassphrase}); err != nil {
					t.Fatalf("staging with the passphrase: %v", err)
				}
			} else {
				if err := d.stageWith(v, v.staging, nil); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "zfs load-key") {
					t.Errorf("staging before the operator loads the key: %v, want FAILED_PRECONDITION naming zfs load-key", err)
				}
				mustRun(t, "zfs", "load-key", adopted) // from the operator's key file
				d.stage(v)
			}
			d.publish(v, false)
			if got := strings.TrimSpace(mustRun(t, "cat", filepath.Join(v.target, "table"))); got != "secret-rows" {
				t.Errorf("the adopted encrypted dataset reads %q", got)
			}
			d.unpublish(v)
			d.unstage(v)
			if _, err := d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: volume.GetVolumeId()}); err != nil {
				t.Errorf("DeleteVolume of the owned adopted volume: %v", err)
			}
		})
	}
}
