package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Namer maps CSI names (up to 128 bytes of any UTF-8) to ZFS name components
// deterministically and injectively. A name made only of safe characters that
// fits is used as is; otherwise it is sanitised and truncated and a hash of
// the original is appended. A name that is safe but looks like such a hashed
// component ("…-<16 hex digits>"), or starts with a prefix the driver keeps
// for its own snapshots, is hashed too: so a kept name never equals another
// name's hashed component, and different names never share a component (up
// to a 64-bit hash collision). The original name is kept in a user property.
//
// The lengths are budgeted so that every ID the driver issues, including a
// snapshot ID "<node>:<parent>/<volume>@<snapshot>" under the longest parent,
// stays within MaxIDLength.
type Namer struct {
	volumeMax   int // bytes for a volume component, generation suffix included
	snapshotMax int
}

const (
	hashLength = 16 // hex digits of SHA-256: 64 bits
	// minComponent keeps at least a few readable bytes next to the hash.
	minComponent = hashLength + 1 + 8
	// generationReserve is room for ":<n>" on a volume re-created while an
	// earlier one of the same name is held by dependents.
	generationReserve = 3
	// MaxGenerations bounds how many deleted-but-held volumes of one name may coexist.
	MaxGenerations = 9
)

// NewNamer sizes components for a configuration; it fails when the node ID and
// parent datasets leave too little room.
func NewNamer(c Config) (Namer, error) {
	longest := 0
	for _, parent := range c.ParentDatasets {
		longest = max(longest, len(parent))
	}
	// "<node>:<parent>/<volume>@<snapshot>"
	room := MaxIDLength - len(c.NodeID) - longest - 3
	n := Namer{volumeMax: room / 2, snapshotMax: room - room/2}
	if n.volumeMax-generationReserve < minComponent || n.snapshotMax < minComponent {
		return Namer{}, fmt.Errorf("node ID %q and parent dataset names of %d bytes leave %d bytes for volume and snapshot names in 128-byte IDs; use a shorter node ID or parent dataset",
			c.NodeID, longest, room)
	}
	return n, nil
}

// VolumeComponent is the dataset component for a volume name in its first
// generation; generation n > 1 appends ":n".
func (n Namer) VolumeComponent(name string, generation int) string {
	component := mapName(name, n.volumeMax-generationReserve)
	if generation > 1 {
		component += ":" + strconv.Itoa(generation)
	}
	return component
}

// SnapshotComponent is the snapshot component (after '@') for a snapshot name.
func (n Namer) SnapshotComponent(name string) string { return mapName(name, n.snapshotMax) }

func mapName(name string, limit int) string {
	var b strings.Builder
	changed := false
	for _, r := range name {
		if zfsNameChar(r) && r != ':' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
			changed = true
		}
	}
	safe := b.String()
	if !changed && len(safe) <= limit && safe != "" && isAlphanumeric(safe[0]) &&
		!looksHashed(safe) && !strings.HasPrefix(safe, InternalSnapshotPrefix) {
		return safe
	}
	sum := sha256.Sum256([]byte(name))
	keep := min(len(safe), limit-hashLength-1)
	// Components start with a letter or digit (never '.', so never "." or "..").
	prefix := strings.Trim(safe[:keep], "_.-")
	if prefix == "" || strings.HasPrefix(prefix, InternalSnapshotPrefix) {
		prefix = "h" + prefix[min(len(prefix), 1):]
	}
	return prefix + "-" + hex.EncodeToString(sum[:])[:hashLength]
}

// InternalSnapshotPrefix starts the names of the snapshots the driver takes
// to clone a volume from a volume; no CSI snapshot name maps to one.
const InternalSnapshotPrefix = "csi-clone-"

// looksHashed reports whether a component ends as mapName's hashed ones do.
func looksHashed(component string) bool {
	n := len(component)
	if n < hashLength+1 || component[n-hashLength-1] != '-' {
		return false
	}
	for _, c := range component[n-hashLength:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// NameProblem says why a CSI volume or snapshot name cannot be served, or is
// "" for a good one. Names are kept in user properties and read back from
// `zfs list -H`, which cannot return a value with a tab or newline intact
// and prints "-" for a property that is not set.
func NameProblem(name string) string {
	switch {
	case name == "":
		return "name is required"
	case len(name) > MaxIDLength:
		return fmt.Sprintf("name is %d bytes, more than %d", len(name), MaxIDLength)
	case !utf8.ValidString(name):
		return "name is not valid UTF-8"
	case name == "-":
		return `name "-" cannot be stored: zfs prints "-" for a property that is not set`
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Sprintf("name %q holds a control character (%U)", name, r)
		}
	}
	return ""
}

func isAlphanumeric(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
