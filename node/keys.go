package node

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/driver"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// loadKey loads an encrypted volume's key from the node-stage secrets when
// it is not loaded (after a reboot, or on a host the pool moved to): one
// `zfs load-key`, the key on its stdin. A volume whose key is loaded, or
// that is not encrypted, costs nothing.
func (s *Server) loadKey(ctx context.Context, volume volumeRef, row zfs.Dataset, secrets map[string]string) error {
	if row.KeyStatus != "unavailable" {
		return nil
	}
	_, key, err := driver.EncryptionKey(secrets)
	if err != nil {
		return invalid("volume %q: %v", volume.id, err)
	}
	if key == nil {
		return status.Errorf(codes.FailedPrecondition,
			"volume %q is encrypted and its key is not loaded: the node-stage secrets must carry %s or %s "+
				"(Kubernetes: the StorageClass's csi.storage.k8s.io/node-stage-secret-name and -namespace; Nomad: the volume's secrets), "+
				"or load it by hand: zfs load-key %s", volume.id, driver.SecretPassphrase, driver.SecretHexKey, volume.dataset)
	}
	err = s.zfs.LoadKey(ctx, volume.dataset, key)
	if errors.Is(err, zfs.ErrKeyRejected) {
		return status.Errorf(codes.InvalidArgument, "volume %q: the key in the node-stage secrets does not open it; nothing changed", volume.id)
	}
	return err
}
