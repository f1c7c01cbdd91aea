package zfstest

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// Native encryption as the Fake plays it: a dataset created with
// encryption=on (or a cipher) takes its key from CreateOptions.Key
// (keylocation=prompt, as zfs reads it from stdin), checked by keyformat;
// clones share their origin's key; keys load and unload.

// fakeCryptoProps are the encryption properties zfs create accepts.
var fakeCryptoProps = map[string]bool{"encryption": true, "keyformat": true, "keylocation": true, "pbkdf2iters": true}

// cryptoProps takes the encryption properties out of props and checks
// them with the key as zfs create does. Callers hold mu.
func (f *Fake) cryptoProps(name string, props map[string]string, key []byte) (encrypted bool, err error) {
	encryption := props["encryption"]
	for prop := range fakeCryptoProps {
		delete(props, prop)
	}
	switch {
	case encryption == "" || encryption == "off":
		if len(key) > 0 {
			return false, f.fail("create", name, zfs.ErrInvalid)
		}
		return false, nil
	case len(key) == 0:
		return false, f.fail("create", name, zfs.ErrInvalid) // keylocation=prompt needs a key on stdin
	}
	return true, nil
}

// checkKey refuses keys zfs would: a passphrase of fewer than 8 bytes, a
// hex key that is not 32 bytes in hex.
func checkKey(format string, key []byte) error {
	switch format {
	case "passphrase":
		if len(key) < 8 || len(key) > 512 {
			return zfs.ErrInvalid
		}
	case "hex":
		if decoded, err := hex.DecodeString(string(key)); err != nil || len(decoded) != 32 {
			return zfs.ErrInvalid
		}
	default:
		return zfs.ErrInvalid
	}
	return nil
}

// LoadKey implements Interface.
func (f *Fake) LoadKey(ctx context.Context, name string, key []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "LoadKey"); err != nil {
		return err
	}
	d, ok := f.datasets[name]
	if !ok {
		return f.fail("load-key", name, zfs.ErrNotFound)
	}
	root := f.encryptionRoot(d)
	switch {
	case root == nil:
		return &zfs.CommandError{Argv: []string{"zfs", "load-key", name}, ExitCode: 1, Kind: zfs.ErrInvalid,
			Stderr: fmt.Sprintf("Key load error: Keys can only be loaded for encrypted datasets ('%s')", name)}
	case root.keyLoaded:
		return nil
	case string(root.key) != string(key):
		return &zfs.CommandError{Argv: []string{"zfs", "load-key", name}, ExitCode: 255, Kind: zfs.ErrKeyRejected,
			Stderr: fmt.Sprintf("Key load error: Incorrect key provided for '%s'.", name)}
	}
	root.keyLoaded = true
	return nil
}

// UnloadKey unloads a dataset's key, as a reboot does (`zfs unload-key`).
func (f *Fake) UnloadKey(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.datasets[name]
	if !ok || f.encryptionRoot(d) == nil {
		return zfs.ErrInvalid
	}
	f.encryptionRoot(d).keyLoaded = false
	return nil
}

// Key is the key a dataset was encrypted with, for tests that check it
// never travels elsewhere; nil for a dataset that is not encrypted.
func (f *Fake) Key(name string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.datasets[name]; ok && f.encryptionRoot(d) != nil {
		return append([]byte(nil), f.encryptionRoot(d).key...)
	}
	return nil
}

// encryptionRoot is the dataset whose key opens d: d itself, or what its
// origin (for a clone) or its dataset (for a snapshot) is encrypted by.
// Callers hold mu.
func (f *Fake) encryptionRoot(d *fakeDataset) *fakeDataset {
	for d != nil {
		if d.key != nil {
			return d
		}
		switch {
		case d.typ == zfs.Snapshot:
			d = f.datasets[datasetOf(d.name)]
		case d.origin != "":
			d = f.datasets[d.origin]
		default:
			return nil
		}
	}
	return nil
}

// keyStatus is the keystatus column. Callers hold mu.
func (f *Fake) keyStatus(d *fakeDataset) string {
	switch root := f.encryptionRoot(d); {
	case root == nil:
		return ""
	case root.keyLoaded:
		return "available"
	}
	return "unavailable"
}
