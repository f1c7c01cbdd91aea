package zfs

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// CommandError is a zfs or zpool command that ran and failed. Kind is the
// sentinel its stderr was classified as, or nil when the text is not one we
// know; Unwrap returns it, so errors.Is(err, ErrNotFound) works through a
// CommandError while Stderr keeps the whole story (which parent is missing,
// which clones depend on a snapshot).
type CommandError struct {
	Argv     []string
	ExitCode int // -1 when the command was ended by a signal
	Stderr   string
	Kind     error
}

// Error names the command and quotes the first line of its stderr, and the
// second when the first only introduces it ("Channel program execution
// failed:" and the Lua error).
func (e *CommandError) Error() string {
	line := firstLine(e.Stderr)
	if rest := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(e.Stderr), line)); strings.HasSuffix(line, ":") && rest != "" {
		line += " " + firstLine(rest)
	}
	if line == "" {
		line = fmt.Sprintf("exit status %d", e.ExitCode)
	}
	return commandName(e.Argv) + ": " + line
}

// Unwrap returns the classified sentinel (nil when unclassified).
func (e *CommandError) Unwrap() error { return e.Kind }

// stderrKinds maps fragments of OpenZFS 2.1–2.3 messages (LC_ALL=C, matched
// lowercased) to the sentinel they mean. Within a line the first fragment in
// this order wins, so specific texts come before the generic "does not
// exist", "must be " and "invalid". Sources are in openzfs/zfs:
// lib/libzfs/libzfs_util.c (zfs_standard_error, libzfs_error_description),
// lib/libzfs/libzfs_dataset.c (check_parents, zfs_create, zfs_clone,
// zfs_valid_proplist), lib/libzfs/libzfs_sendrecv.c (zfs_receive_one),
// lib/libzfs/libzfs_crypto.c (zfs_crypto_load_key) and cmd/zfs/zfs_main.c
// (zfs_do_destroy).
var stderrKinds = []struct {
	fragment string
	kind     error
}{
	{"incorrect key provided", ErrKeyRejected},
	{"keys must be loaded for encryption root of", ErrNotEncryptionRoot},
	{"not an earlier snapshot", ErrInvalid},
	{"is not earlier than", ErrInvalid},
	{"key already loaded", ErrKeyLoaded},
	{"encryption key not loaded", ErrKeyUnavailable},
	{"parent does not exist", ErrParentMissing},
	{"no such parent", ErrParentMissing},
	{"channel program execution failed", ErrProgram},
	{"source and target pools differ", ErrCrossPool},
	{"it's being held", ErrHeld},
	{"pool is read-only", ErrReadOnlyPool},
	{"read-only file system", ErrReadOnlyPool},
	{"dataset does not exist", ErrNotFound},
	{"could not find any snapshots to destroy", ErrNotFound},
	{"no such pool or dataset", ErrNotFound},
	{"does not exist", ErrNotFound},
	{"no such pool", ErrPoolNotFound},
	{"already exists", ErrExists},
	{"pool or dataset exists", ErrExists},
	{"'' exists", ErrExists}, // "destination 'x' exists" once the name is blanked
	{"dataset is busy", ErrBusy},
	{"target is busy", ErrBusy},
	{"pool is busy", ErrBusy},
	{"out of space", ErrNoSpace},
	{"size is greater than available space", ErrNoSpace},
	{"quota exceeded", ErrNoSpace},
	{"has children", ErrHasDependents},
	{"has dependent clones", ErrHasDependents},
	{"snapshot is cloned", ErrHasDependents},
	{"i/o is currently suspended", ErrPoolSuspended},
	{"permission denied", ErrPermission},
	{"i/o error", ErrIO},
	{"bad numeric value", ErrInvalid},
	{"numeric value is too large", ErrInvalid},
	{"is readonly", ErrInvalid},
	{"read-only property", ErrInvalid},
	{"apply to datasets of this type", ErrInvalid},
	{"not applicable to datasets of this type", ErrInvalid},
	{"does not apply to pools", ErrInvalid},
	{"volume size cannot be zero", ErrInvalid},
	{"is not expected here", ErrInvalid},
	{"delimiter in snapshot name", ErrInvalid},
	{"to disable quota/refquota", ErrInvalid},
	{"size is less than current used or reserved space", ErrInvalid},
	{"too long", ErrInvalid},
	{"bad property list", ErrInvalid},
	{"must be ", ErrInvalid},
	{"invalid", ErrInvalid},
}

// quotedWord matches a quoted name such as 'tank/invalid-vol'. Classification
// blanks these so that a dataset's name can never change what a message means.
var quotedWord = regexp.MustCompile(`'[^'\s]*'`)

// classify returns the sentinel for a command's stderr, or nil. The first line
// that matches anything decides: zfs puts the error first and follows it with
// hints ("use '-r' to destroy the following datasets:") and dataset lists.
func classify(stderr string) error {
	for _, line := range strings.Split(stderr, "\n") {
		line = quotedWord.ReplaceAllString(strings.ToLower(line), "''")
		for _, entry := range stderrKinds {
			if strings.Contains(line, entry.fragment) {
				return entry.kind
			}
		}
	}
	return nil
}

// isMissingDataset reports whether a stderr line is zfs saying that a
// dataset it was asked to open does not exist.
func isMissingDataset(line string) bool {
	return strings.HasPrefix(line, "cannot open '") && strings.HasSuffix(line, "': dataset does not exist")
}

// commandName is "zfs create" for argv {"/usr/sbin/zfs", "create", …}.
func commandName(argv []string) string {
	if len(argv) == 0 {
		return "zfs"
	}
	name := filepath.Base(argv[0])
	if len(argv) > 1 {
		name += " " + argv[1]
	}
	return name
}

func firstLine(text string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
	return line
}
