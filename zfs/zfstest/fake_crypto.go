package zfstest

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// Native encryption as the Fake plays it, after OpenZFS 2.3: a dataset
// created with encryption=on (or a cipher) takes its key from
// CreateOptions.Key (keylocation=prompt, as zfs reads it from stdin) and is
// an encryption root. Every other dataset's encryption root is fixed when it
// is made: a snapshot's is its dataset's, a clone's its origin's (zfs clone
// cannot give a clone a key of its own), and a new dataset under an encrypted
// parent inherits the parent's. A key is loaded or not at its root only, for
// every dataset sharing that root at once; `zfs load-key` (and `-n`) on any
// other dataset is refused naming the root (lib/libzfs/libzfs_crypto.c,
// zfs_crypto_load_key).

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

// setEncryptionRoot fixes a new dataset's encryption root, as ZFS does
// when it makes it (see the top of this file). Callers hold mu.
func (f *Fake) setEncryptionRoot(d *fakeDataset) {
	var from *fakeDataset
	switch {
	case d.key != nil:
		d.encryptionRoot = d.name
		return
	case d.typ == zfs.Snapshot:
		from = f.datasets[datasetOf(d.name)]
	case d.origin != "":
		from = f.datasets[d.origin]
	default:
		from = f.datasets[parentOf(d.name)]
	}
	if from != nil {
		d.encryptionRoot = from.encryptionRoot
	}
}

// LoadKey implements Interface: `zfs load-key name`.
func (f *Fake) LoadKey(ctx context.Context, name string, key []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "LoadKey"); err != nil {
		return err
	}
	argv := []string{"zfs", "load-key", name}
	root, err := f.keyRoot(argv, name, "loaded")
	switch {
	case err != nil:
		return err
	case root.keyLoaded: // checked before the key is read: any key gets this
		return &zfs.CommandError{Argv: argv, ExitCode: 255, Kind: zfs.ErrKeyLoaded,
			Stderr: fmt.Sprintf("Key load error: Key already loaded for '%s'.\n", name)}
	case !bytes.Equal(root.key, key):
		return incorrectKey(argv, name)
	}
	root.keyLoaded = true
	return nil
}

// VerifyKey implements Interface: `zfs load-key -n name`, which checks the
// key whether or not it is loaded and changes nothing.
func (f *Fake) VerifyKey(ctx context.Context, name string, key []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "VerifyKey"); err != nil {
		return err
	}
	argv := []string{"zfs", "load-key", "-n", name}
	root, err := f.keyRoot(argv, name, "loaded")
	if err != nil {
		return err
	}
	if !bytes.Equal(root.key, key) {
		return incorrectKey(argv, name)
	}
	return nil
}

// UnloadKey unloads an encryption root's key, as a reboot does, refusing
// what `zfs unload-key` refuses: a dataset that is not its encryption root,
// a key already unloaded, and a key in use (a dataset sharing it busy, as a
// mounted one is).
func (f *Fake) UnloadKey(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	argv := []string{"zfs", "unload-key", name}
	root, err := f.keyRoot(argv, name, "unloaded")
	if err != nil {
		return err
	}
	if !root.keyLoaded {
		return &zfs.CommandError{Argv: argv, ExitCode: 255, Kind: zfs.ErrKeyUnavailable,
			Stderr: fmt.Sprintf("Key unload error: Key already unloaded for '%s'.\n", name)}
	}
	for other, d := range f.datasets {
		if d.encryptionRoot == name && f.busy[other] {
			return &zfs.CommandError{Argv: argv, ExitCode: 255, Kind: zfs.ErrBusy,
				Stderr: fmt.Sprintf("Key unload error: '%s' is busy.\n", name)}
		}
	}
	root.keyLoaded = false
	return nil
}

// keyRoot is the dataset name if it is an encryption root, else the error
// zfs load-key or unload-key (action "loaded" or "unloaded") gives, exit
// status 255 as zfs_main's load_unload_keys returns -1. Callers hold mu.
func (f *Fake) keyRoot(argv []string, name, action string) (*fakeDataset, error) {
	d, ok := f.datasets[name]
	if !ok || d.typ == zfs.Snapshot {
		return nil, &zfs.CommandError{Argv: argv, ExitCode: 1, Kind: zfs.ErrNotFound,
			Stderr: fmt.Sprintf("cannot open '%s': dataset does not exist\n", name)}
	}
	errorPrefix := "Key load error"
	if action == "unloaded" {
		errorPrefix = "Key unload error"
	}
	switch d.encryptionRoot {
	case "":
		return nil, &zfs.CommandError{Argv: argv, ExitCode: 255, Kind: zfs.ErrInvalid,
			Stderr: fmt.Sprintf("%s: '%s' is not encrypted.\n", errorPrefix, name)}
	case name:
		return d, nil
	}
	return nil, &zfs.CommandError{Argv: argv, ExitCode: 255, Kind: zfs.ErrNotEncryptionRoot,
		Stderr: fmt.Sprintf("%s: Keys must be %s for encryption root of '%s' (%s).\n", errorPrefix, action, name, d.encryptionRoot)}
}

func incorrectKey(argv []string, name string) error {
	return &zfs.CommandError{Argv: argv, ExitCode: 255, Kind: zfs.ErrKeyRejected,
		Stderr: fmt.Sprintf("Key load error: Incorrect key provided for '%s'.\n", name)}
}

// Key is the key a dataset was encrypted with (its encryption root's), for
// tests that check it never travels elsewhere; nil for a dataset that is
// not encrypted.
func (f *Fake) Key(name string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.datasets[name]; ok {
		if root := f.datasets[d.encryptionRoot]; root != nil {
			return append([]byte(nil), root.key...)
		}
	}
	return nil
}

// cryptoColumns fills what `zfs list -o keystatus,encryptionroot` prints
// for d: "-" (read as "") for both when it is not encrypted, else its
// root's key status, which every dataset sharing the root has. Callers
// hold mu.
func (f *Fake) cryptoColumns(d *fakeDataset, row *zfs.Dataset) {
	root := f.datasets[d.encryptionRoot]
	if root == nil {
		return
	}
	row.EncryptionRoot, row.KeyStatus = root.name, "unavailable"
	if root.keyLoaded {
		row.KeyStatus = "available"
	}
}
