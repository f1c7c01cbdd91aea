package zfs

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const secret = "correct horse battery staple"

func TestAKeyReachesZFSOnStdinOnly(t *testing.T) {
	f := newFakeZFS(t)
	f.set("zfs.create", "read-stdin", "")
	err := NewExec(ExecConfig{}).Create(t.Context(), "tank/csi/v", CreateOptions{Key: []byte(secret),
		Properties: map[string]string{"encryption": "on", "keyformat": "passphrase", "keylocation": "prompt"}})
	if err != nil {
		t.Fatal(err)
	}
	argv := f.argv("zfs.create")
	if strings.Contains(strings.Join(argv, " "), secret) {
		t.Errorf("the key is in the argv: %q", argv)
	}
	if !slices.Contains(argv, "keylocation=prompt") {
		t.Errorf("argv %q lacks keylocation=prompt", argv)
	}
	if stdin, _ := f.recorded("zfs.create", "stdin"); stdin != secret+"\n" {
		t.Errorf("stdin %q, want the key and a newline", stdin)
	}
	if err := NewExec(ExecConfig{}).Create(t.Context(), "tank/csi/w", CreateOptions{Key: []byte(secret),
		Properties: map[string]string{"encryption": "on", "keyformat": "passphrase", "keylocation": "file:///k"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a key with keylocation other than prompt: got %v, want ErrInvalid", err)
	}
}

func TestLoadKeyClassifiesZFSsAnswers(t *testing.T) {
	for _, test := range []struct {
		name, stderr string
		want         error
	}{
		{"the right key", "", nil},
		{"a key already loaded is success", "Key load error: Key already loaded for 'tank/csi/v'.", nil},
		{"a wrong key is ErrKeyRejected", "Key load error: Incorrect key provided for 'tank/csi/v'.", ErrKeyRejected},
	} {
		t.Run(test.name, func(t *testing.T) {
			f := newFakeZFS(t)
			f.set("zfs.load-key", "read-stdin", "")
			if test.stderr != "" {
				f.fail("zfs.load-key", test.stderr)
			}
			err := NewExec(ExecConfig{}).LoadKey(t.Context(), "tank/csi/v", []byte(secret))
			if !errors.Is(err, test.want) || (test.want == nil && err != nil) {
				t.Fatalf("got %v, want %v", err, test.want)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("the error quotes the key: %v", err)
			}
			if stdin, _ := f.recorded("zfs.load-key", "stdin"); stdin != secret+"\n" {
				t.Errorf("stdin %q", stdin)
			}
		})
	}
}
