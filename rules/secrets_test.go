package rules

import (
	"strings"
	"testing"
)

func TestEncryptionKeyReadsOneKeyOfAKnownFormat(t *testing.T) {
	const hexKey = "5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7"
	for _, test := range []struct {
		name       string
		secrets    map[string]string
		wantFormat string
		wantErr    string // a fragment of the error, "" for none
	}{
		{"no secrets carry no key", nil, "", ""},
		{"other secrets carry no key", map[string]string{"token": "x"}, "", ""},
		{"a passphrase", map[string]string{SecretPassphrase: "correct horse"}, "passphrase", ""},
		{"a hex key", map[string]string{SecretHexKey: hexKey}, "hex", ""},
		{"both are refused", map[string]string{SecretPassphrase: "correct horse", SecretHexKey: hexKey}, "", "give one"},
		{"a passphrase under 8 bytes", map[string]string{SecretPassphrase: "short"}, "", "8 to 512"},
		{"a passphrase over 512 bytes", map[string]string{SecretPassphrase: strings.Repeat("p", 513)}, "", "8 to 512"},
		{"a hex key of 31 bytes", map[string]string{SecretHexKey: hexKey[:62]}, "", "64 hexadecimal"},
		// zfs reads one line: "correct horse\nA" and "correct horse\nB" would
		// be the same key, and a NUL ends a C string.
		{"a passphrase with a newline", map[string]string{SecretPassphrase: "correct horse\nbattery"}, "", "line break or NUL"},
		{"a passphrase ending in a newline", map[string]string{SecretPassphrase: "correct horse\n"}, "", "line break or NUL"},
		{"a passphrase with a carriage return", map[string]string{SecretPassphrase: "correct horse\r"}, "", "line break or NUL"},
		{"a passphrase with a NUL", map[string]string{SecretPassphrase: "correct horse\x00battery"}, "", "line break or NUL"},
		{"a hex key with a newline", map[string]string{SecretHexKey: hexKey + "\n"}, "", "line break or NUL"},
		{"a hex key with a NUL", map[string]string{SecretHexKey: hexKey + "\x00ff"}, "", "line break or NUL"},
	} {
		t.Run(test.name, func(t *testing.T) {
			format, key, err := EncryptionKey(test.secrets)
			if test.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), test.wantErr) || key != nil {
					t.Fatalf("got %q %v, want an error with %q", key, err, test.wantErr)
				}
				for _, secret := range test.secrets {
					if len(secret) >= 8 && strings.Contains(err.Error(), secret) {
						t.Errorf("the error quotes a secret: %v", err)
					}
				}
				return
			}
			if err != nil || format != test.wantFormat {
				t.Fatalf("got %q %v, want format %q", format, err, test.wantFormat)
			}
			if want := test.secrets[SecretPassphrase] + test.secrets[SecretHexKey]; string(key) != want {
				t.Errorf("key %q, want %q", key, want)
			}
		})
	}
}
