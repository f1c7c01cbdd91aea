package rules

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// The secrets that carry an encrypted volume's key: CreateVolume's (to make
// it) and NodeStageVolume's (to load it after a reboot, and to check it
// when it is loaded). Kubernetes passes them from the StorageClass's
// csi.storage.k8s.io/provisioner-secret-* and node-stage-secret-*; Nomad
// from the volume specification's secrets block.
const (
	SecretPassphrase = "encryptionPassphrase" // keyformat=passphrase: 8 to 512 bytes
	SecretHexKey     = "encryptionKey"        // keyformat=hex: 32 bytes as 64 hex digits
)

// lineBreaks are what a key must not hold: zfs reads a key from stdin as
// one line (keylocation=prompt) and C strings end at NUL, so "pass\nA" and
// "pass\nB" would both make or open a volume with "pass", and a secret
// file's stray line ending would become part of the key or be cut at.
const lineBreaks = "\n\r\x00"

// EncryptionKey reads the key from secrets: its keyformat and bytes, or ""
// and nil when the secrets carry none. A problem never quotes a secret.
func EncryptionKey(secrets map[string]string) (format string, key []byte, err error) {
	passphrase, hasPassphrase := secrets[SecretPassphrase]
	hexKey, hasHex := secrets[SecretHexKey]
	for _, name := range []string{SecretPassphrase, SecretHexKey} {
		if strings.ContainsAny(secrets[name], lineBreaks) {
			return "", nil, fmt.Errorf("secret %s holds a line break or NUL: zfs reads a key as one line, so part of it would make or open the volume", name)
		}
	}
	switch {
	case hasPassphrase && hasHex:
		return "", nil, fmt.Errorf("the secrets carry both %s and %s: give one", SecretPassphrase, SecretHexKey)
	case hasPassphrase:
		if len(passphrase) < 8 || len(passphrase) > 512 {
			return "", nil, fmt.Errorf("secret %s must be 8 to 512 bytes long (it is %d)", SecretPassphrase, len(passphrase))
		}
		return "passphrase", []byte(passphrase), nil
	case hasHex:
		if decoded, err := hex.DecodeString(hexKey); err != nil || len(decoded) != 32 {
			return "", nil, fmt.Errorf("secret %s must be 64 hexadecimal digits (32 bytes)", SecretHexKey)
		}
		return "hex", []byte(hexKey), nil
	}
	return "", nil, nil
}
