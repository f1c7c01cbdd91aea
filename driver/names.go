package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Namer maps CSI names (up to 128 bytes of any UTF-8) to ZFS name components
// deterministically. A name made only of safe characters that fits is used as
// is; otherwise it is sanitised and truncated and a hash of the original is
// appended, so different names never share a component. The original name is
// kept in a user property.
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
	if !changed && len(safe) <= limit && safe != "" && isAlphanumeric(safe[0]) {
		return safe
	}
	sum := sha256.Sum256([]byte(name))
	keep := min(len(safe), limit-hashLength-1)
	// Components start with a letter or digit (never '.', so never "." or "..").
	prefix := strings.Trim(safe[:keep], "_.-")
	if prefix == "" {
		prefix = "h"
	}
	return prefix + "-" + hex.EncodeToString(sum[:])[:hashLength]
}

func isAlphanumeric(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
