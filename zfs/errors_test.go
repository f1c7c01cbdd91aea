package zfs

import (
	"errors"
	"testing"
)

// The samples are OpenZFS 2.1–2.3 messages as printed with LC_ALL=C, put
// together from the format strings in openzfs/zfs (lib/libzfs/libzfs_util.c,
// lib/libzfs/libzfs_dataset.c, lib/libzfs/libzfs_sendrecv.c,
// lib/libzfs/libzfs_pool.c, cmd/zfs/zfs_main.c); every fragment in
// stderrKinds has at least one.
func TestStderrIsClassifiedIntoSentinels(t *testing.T) {
	tests := []struct {
		name   string
		stderr string
		want   error
	}{
		{"opening a dataset that does not exist",
			"cannot open 'tank/csi/pvc-a': dataset does not exist\n", ErrNotFound},
		{"destroying a snapshot that does not exist",
			"could not find any snapshots to destroy; check snapshot names.\n", ErrNotFound},
		{"creating under a parent that does not exist",
			"cannot create 'tank/csi/missing/pvc-a': parent does not exist\n", ErrNotFound},
		{"a parent destroyed while the create ran",
			"cannot create 'tank/csi/pvc-a': no such parent 'tank/csi'\n", ErrNotFound},
		{"the generic no-entry description",
			"cannot destroy 'tank/csi/pvc-a': no such pool or dataset\n", ErrNotFound},
		{"receiving a clone whose origin is gone",
			"cannot receive: local origin for clone tank/csi/pvc-c@snap-1 does not exist\n", ErrNotFound},
		{"opening a pool that does not exist",
			"cannot open 'nopool': no such pool\n", ErrPoolNotFound},
		{"creating in a pool that does not exist",
			"cannot create 'nopool/csi': no such pool 'nopool'\n", ErrPoolNotFound},
		{"creating a dataset that exists",
			"cannot create 'tank/csi/pvc-a': dataset already exists\n", ErrExists},
		{"receiving a snapshot that exists",
			"cannot restore to tank/csi/pvc-copy@snap-1: destination already exists\n", ErrExists},
		{"receiving over an existing dataset",
			"cannot receive new filesystem stream: destination 'tank/csi/pvc-copy' exists\n" +
				"must specify -F to overwrite it\n", ErrExists},
		{"the generic exists description",
			"cannot create 'tank/csi/pvc-a': pool or dataset exists\n", ErrExists},
		{"destroying a dataset in use",
			"cannot destroy 'tank/csi/pvc-a': dataset is busy\n", ErrBusy},
		{"unmounting a busy filesystem",
			"cannot unmount '/var/lib/kubelet/pods/x/mount': pool or dataset is busy\n", ErrBusy},
		{"umount(8) refusing a busy mount",
			"umount: /var/lib/kubelet/pods/x/mount: target is busy.\n", ErrBusy},
		{"a busy pool",
			"cannot export 'tank': pool is busy\n", ErrBusy},
		{"creating without space",
			"cannot create 'tank/csi/pvc-a': out of space\n", ErrNoSpace},
		{"reserving more than is available",
			"cannot set property for 'tank/csi/pvc-b': size is greater than available space\n", ErrNoSpace},
		{"receiving past a quota",
			"cannot receive new filesystem stream: destination tank/csi/pvc-copy space quota exceeded.\n", ErrNoSpace},
		{"destroying a filesystem with children",
			"cannot destroy 'tank/csi/pvc-a': filesystem has children\n" +
				"use '-r' to destroy the following datasets:\ntank/csi/pvc-a@snap-1\n", ErrHasDependents},
		{"destroying a snapshot with clones",
			"cannot destroy 'tank/csi/pvc-a@snap-1': snapshot has dependent clones\n" +
				"use '-R' to destroy the following datasets:\ntank/csi/pvc-c\n", ErrHasDependents},
		{"a clone appearing while a snapshot is destroyed",
			"cannot destroy snapshot tank/csi/pvc-a@snap-1: snapshot is cloned\n", ErrHasDependents},
		{"a suspended pool",
			"cannot create 'tank/csi/pvc-a': pool I/O is currently suspended\n", ErrPoolSuspended},
		{"a delegation that does not allow the operation",
			"cannot create 'tank/csi/pvc-a': permission denied\n", ErrPermission},
		{"running zfs without root",
			"Permission denied the ZFS utilities must be run as root.\n", ErrPermission},
		{"an unknown property",
			"cannot create 'tank/csi/pvc-a': invalid property 'bogus'\n", ErrInvalid},
		{"a value outside an index property's list",
			"cannot create 'tank/csi/pvc-a': 'compression' must be one of 'on | off | lz4 | zstd'\n", ErrInvalid},
		{"a size that is not a number",
			"cannot create 'tank/csi/pvc-a': bad numeric value 'ten'\n", ErrInvalid},
		{"a size that does not fit 64 bits",
			"cannot create 'tank/csi/pvc-a': numeric value is too large\n", ErrInvalid},
		{"a volume size off the block size",
			"cannot create 'tank/csi/pvc-b': volume size must be a multiple of volume block size\n", ErrInvalid},
		{"a volume of size zero",
			"cannot create 'tank/csi/pvc-b': volume size cannot be zero\n", ErrInvalid},
		{"setting a read-only property",
			"cannot set property for 'tank/csi/pvc-a': 'used' is readonly\n", ErrInvalid},
		{"the generic read-only property description",
			"cannot set property for 'tank/csi/pvc-a': read-only property\n", ErrInvalid},
		{"a property of another dataset type",
			"cannot create 'tank/csi/pvc-a': 'volblocksize' does not apply to datasets of this type\n", ErrInvalid},
		{"opening a dataset as the wrong type",
			"cannot open 'tank/csi/pvc-a': operation not applicable to datasets of this type\n", ErrInvalid},
		{"a snapshot name where a dataset belongs",
			"cannot open 'tank/csi/pvc-a@snap-1': snapshot delimiter '@' is not expected here\n", ErrInvalid},
		{"a dataset name where a snapshot belongs",
			"cannot open 'tank/csi/pvc-a': missing '@' delimiter in snapshot name\n", ErrInvalid},
		{"a refquota of zero",
			"cannot create 'tank/csi/pvc-a': use 'none' to disable quota/refquota\n", ErrInvalid},
		{"shrinking a refquota below what is used",
			"cannot set property for 'tank/csi/pvc-a': size is less than current used or reserved space\n", ErrInvalid},
		{"a name that is too long",
			"cannot create 'tank/csi/pvc-a': dataset name is too long\n", ErrInvalid},
		{"a bad zfs list -o argument",
			"bad property list: invalid property 'zfs.csi.dev'\n", ErrInvalid},
		{"an invalid character",
			"cannot create 'tank/csi/pvc a': invalid character ' ' in name\n", ErrInvalid},
		{"an unknown failure has no kind",
			"cannot create 'tank/csi/pvc-a': I/O error\n", nil},
		{"a dataset name never decides the kind",
			"cannot open 'tank/invalid-permission-denied': I/O error\n", nil},
		{"a missing kernel module has no kind",
			"The ZFS modules are not loaded.\nTry running 'modprobe zfs' as root to load them.\n", nil},
		{"empty stderr has no kind", "", nil},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			got := classify(test.stderr)
			if got != test.want {
				t.Errorf("classify(%q) = %v, want %v", test.stderr, got, test.want)
			}
		})
	}
}

func TestCommandErrorUnwrapsToItsKindOnly(t *testing.T) {
	known := &CommandError{Argv: []string{"/sbin/zfs", "destroy", "tank/a"}, ExitCode: 1,
		Stderr: "cannot destroy 'tank/a': dataset is busy\n", Kind: ErrBusy}
	if !errors.Is(known, ErrBusy) || errors.Is(known, ErrNotFound) {
		t.Errorf("errors.Is does not follow Kind")
	}
	if got, want := known.Error(), "zfs destroy: cannot destroy 'tank/a': dataset is busy"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	unknown := &CommandError{Argv: []string{"zpool", "list"}, ExitCode: -1}
	if unknown.Unwrap() != nil {
		t.Errorf("an unclassified error unwraps to %v", unknown.Unwrap())
	}
	if got, want := unknown.Error(), "zpool list: exit status -1"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
