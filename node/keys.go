package node

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// loadKey makes an encrypted volume's key ready for staging from the
// node-stage secrets: it loads the key when it is not loaded (after a
// reboot, or on a host the pool moved to), and checks it when it is, so
// that whoever stages a volume must hold its key — a second volume
// specification (Nomad) or PersistentVolume (Kubernetes) naming the same
// volume ID with other secrets gets INVALID_ARGUMENT, not the data.
//
// ZFS keeps a key at the volume's encryption root, not at each dataset: a
// restore (a clone of a snapshot) or a clone of a volume shares its
// origin's, even once that origin is deleted and only held by the clone.
// `zfs load-key` anywhere else is refused, so the key is loaded (or
// checked, with `zfs load-key -n`) at the root, after the ownership guard
// (decision 2) says that root is a volume of ours, live or deleted. A root
// the operator owns (an encrypted parent dataset) is the operator's to
// unlock: staging waits for `zfs load-key <root>` by hand and never offers
// it a secret. Loading at a root other volumes share needs none of their
// locks: a key loaded by a concurrent stage is "already loaded", and the key
// given is then checked as for any loaded key.
//
// The key reaches zfs on stdin only (zfs.Exec), never argv, log or disk.
// Costs: nothing for a volume that is not encrypted, or whose key is loaded
// and no secret came with the request; else one `zfs load-key` (or `-n`;
// a passphrase costs its PBKDF2 rounds either way), plus a read of the
// root when the root is another dataset (zfs.Inspect, as the volume's).
func (s *Server) loadKey(ctx context.Context, volume volumeRef, row zfs.Dataset, secrets map[string]string) error {
	if row.KeyStatus == "" {
		return nil // not encrypted: a key in the secrets would protect nothing
	}
	_, key, err := rules.EncryptionKey(secrets)
	if err != nil {
		return invalid("volume %q: %v", volume.id, err)
	}
	loaded := row.KeyStatus == "available"
	if key == nil && loaded {
		// Nothing to check. Refusing would break every CO set up without
		// node-stage secrets, which were needed only after a reboot until
		// now (secrets given are checked; they are not required). What guards a loaded key is who reaches the socket;
		// docs/encryption.md says so: encryption protects data at rest.
		return nil
	}
	root := row.EncryptionRoot
	if root == "" {
		root = volume.dataset // zfs always names one; never load anywhere but a dataset of ours
	}
	if root != volume.dataset {
		ours, err := s.encryptionRootOfOurs(ctx, root)
		if err != nil {
			return err
		}
		if !ours {
			return s.operatorsKey(volume, root, loaded)
		}
	}
	if key == nil {
		return status.Errorf(codes.FailedPrecondition,
			"volume %q is encrypted and its key is not loaded: the node-stage secrets must carry %s or %s "+
				"(Kubernetes: the StorageClass's csi.storage.k8s.io/node-stage-secret-name and -namespace; Nomad: the volume's secrets), "+
				"or load it by hand: zfs load-key %s", volume.id, rules.SecretPassphrase, rules.SecretHexKey, root)
	}
	if !loaded {
		err = s.zfs.LoadKey(ctx, root, key)
		// Loaded since the listing (staging a volume sharing the root, or
		// an operator): zfs said so without reading the key given.
		loaded = errors.Is(err, zfs.ErrKeyLoaded)
	}
	if loaded {
		err = s.zfs.VerifyKey(ctx, root, key)
	}
	// The words are the node's; the codes are rpc.Status's table.
	switch {
	case errors.Is(err, zfs.ErrKeyRejected):
		return rpc.Status(fmt.Errorf("volume %q: the key in the node-stage secrets does not open it; nothing changed: %w", volume.id, err))
	case errors.Is(err, zfs.ErrNotEncryptionRoot):
		// The root moved between the listing and the load (an operator's
		// zfs promote or change-key): the next attempt reads it afresh.
		return rpc.Status(fmt.Errorf("volume %q: its encryption root changed while staging: %w", volume.id, err))
	}
	return err
}

// encryptionRootOfOurs reports whether an encryption root is a volume of
// this driver, live or deleted (rules.Owner.Marked), read as the volume
// was (zfs.Inspect).
func (s *Server) encryptionRootOfOurs(ctx context.Context, root string) (bool, error) {
	row, err := zfs.Inspect(ctx, s.zfs, root, s.props.All())
	if errors.Is(err, zfs.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return s.owner.Marked(row), nil
}

// operatorsKey answers for a volume whose encryption root is not ours. A
// loaded key stages as an unencrypted volume would: the secrets were never
// this volume's key (the driver made it without one, under an encrypted
// parent), so there is nothing of ours to check them against, and offering
// them to the operator's root would make the socket a passphrase oracle.
func (s *Server) operatorsKey(volume volumeRef, root string, loaded bool) error {
	if loaded {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition,
		"volume %q is encrypted by %s, which is not a volume of %s, and that key is not loaded: "+
			"the operator loads it by hand (zfs load-key %s); the node-stage secrets are not used for it",
		volume.id, root, s.cfg.DriverName, root)
}
