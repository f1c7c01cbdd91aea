package zfs

import (
	"context"
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

// The stderr and exit status below are zfs_crypto_load_key's and
// load_unload_keys' (lib/libzfs/libzfs_crypto.c, cmd/zfs/zfs_main.c in
// OpenZFS 2.3): every refusal exits 255, and -n prints its count on stdout.
func TestLoadKeyAndVerifyKeyClassifyZFSsAnswers(t *testing.T) {
	load := func(ctx context.Context, e *Exec) error { return e.LoadKey(ctx, "tank/csi/v", []byte(secret)) }
	verify := func(ctx context.Context, e *Exec) error { return e.VerifyKey(ctx, "tank/csi/v", []byte(secret)) }
	for _, test := range []struct {
		name, stdout, stderr string
		call                 func(context.Context, *Exec) error
		wantArgv             []string
		want                 error
	}{
		{"load-key with the right key", "", "", load, []string{"load-key", "tank/csi/v"}, nil},
		{"load-key of a key already loaded is ErrKeyLoaded, the key given unchecked", "",
			"Key load error: Key already loaded for 'tank/csi/v'.\n", load, []string{"load-key", "tank/csi/v"}, ErrKeyLoaded},
		{"load-key with a wrong key is ErrKeyRejected", "", "Key load error: Incorrect key provided for 'tank/csi/v'.\n",
			load, []string{"load-key", "tank/csi/v"}, ErrKeyRejected},
		{"load-key of a clone is ErrNotEncryptionRoot", "",
			"Key load error: Keys must be loaded for encryption root of 'tank/csi/v' (tank/csi/invalid-origin).\n",
			load, []string{"load-key", "tank/csi/v"}, ErrNotEncryptionRoot},
		{"load-key -n with the right key, loaded or not", "1 / 1 key(s) successfully verified\n", "",
			verify, []string{"load-key", "-n", "tank/csi/v"}, nil},
		{"load-key -n with a wrong key is ErrKeyRejected", "0 / 1 key(s) successfully verified\n",
			"Key load error: Incorrect key provided for 'tank/csi/v'.\n", verify, []string{"load-key", "-n", "tank/csi/v"}, ErrKeyRejected},
		{"load-key -n of a clone is ErrNotEncryptionRoot", "0 / 1 key(s) successfully verified\n",
			"Key load error: Keys must be loaded for encryption root of 'tank/csi/v' (tank/csi/pvc-a).\n",
			verify, []string{"load-key", "-n", "tank/csi/v"}, ErrNotEncryptionRoot},
	} {
		t.Run(test.name, func(t *testing.T) {
			f := newFakeZFS(t)
			f.set("zfs.load-key", "read-stdin", "")
			f.set("zfs.load-key", "stdout", test.stdout)
			if test.stderr != "" {
				f.set("zfs.load-key", "stderr", test.stderr)
				f.set("zfs.load-key", "exit", "255")
			}
			err := test.call(t.Context(), NewExec(ExecConfig{}))
			if !errors.Is(err, test.want) || (test.want == nil && err != nil) {
				t.Fatalf("got %v, want %v", err, test.want)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("the error quotes the key: %v", err)
			}
			if argv := f.argv("zfs.load-key"); !slices.Equal(argv, test.wantArgv) {
				t.Errorf("argv %q, want %q", argv, test.wantArgv)
			}
			if stdin, _ := f.recorded("zfs.load-key", "stdin"); stdin != secret+"\n" {
				t.Errorf("stdin %q", stdin)
			}
		})
	}
}

func TestListWithCryptoReadsKeyStatusAndEncryptionRoot(t *testing.T) {
	fake := newFakeZFS(t)
	fake.set("zfs.list", "stdout", "tank/csi/pvc-c\tfilesystem\ttank/csi/pvc-a@snap-1\t0\t24576\t1073717248\t12288\t1073741824\t0\t-\t-\t1795317108\toff\t-\t-\tunavailable\ttank/csi/pvc-a\tpvc-c\ttrue\n"+
		"tank/csi/pvc-p\tfilesystem\t-\t0\t24576\t1073717248\t12288\t1073741824\t0\t-\t-\t1795317108\toff\t-\t-\t-\t-\tpvc-p\ttrue\n")
	rows, err := NewExec(ExecConfig{}).List(t.Context(), ListOptions{Roots: []string{"tank/csi/pvc-c", "tank/csi/pvc-p"}, UserProps: csiProps, Crypto: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"list", "-H", "-p", "-o", datasetColumns + ",keystatus,encryptionroot," + csiProps[0] + "," + csiProps[1],
		"-t", "filesystem,volume", "-d", "0", "tank/csi/pvc-c", "tank/csi/pvc-p"}
	if argv := fake.argv("zfs.list"); !slices.Equal(argv, want) {
		t.Errorf("argv\n got %q\nwant %q", argv, want)
	}
	if len(rows) != 2 || rows[0].KeyStatus != "unavailable" || rows[0].EncryptionRoot != "tank/csi/pvc-a" ||
		rows[0].User["zfs.csi.dev:managed"] != "true" || rows[1].KeyStatus != "" || rows[1].EncryptionRoot != "" {
		t.Errorf("rows = %+v", rows)
	}
}
