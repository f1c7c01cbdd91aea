package rules

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

// SpecNameProblem says why the spec refuses a CSI volume or snapshot name,
// or is "" for one it allows: any UTF-8 string of 1 to 128 bytes, tabs,
// newlines and "-" included. Such names are stored through EncodeName.
func SpecNameProblem(name string) string {
	switch {
	case name == "":
		return "name is required"
	case len(name) > MaxIDLength:
		return fmt.Sprintf("name is %d bytes, more than %d", len(name), MaxIDLength)
	case !utf8.ValidString(name):
		return "name is not valid UTF-8"
	}
	return ""
}

// NameProblem is SpecNameProblem for names kept in a property as they are,
// without EncodeName (group snapshot names): those must also avoid what
// `zfs list -H` cannot return intact, a tab or newline, and "-", which zfs
// prints for a property that is not set.
func NameProblem(name string) string {
	if problem := SpecNameProblem(name); problem != "" {
		return problem
	}
	if name == "-" {
		return `name "-" cannot be stored: zfs prints "-" for a property that is not set`
	}
	if hasControl(name) {
		return fmt.Sprintf("name %q holds a control character", name)
	}
	return ""
}

// EncodeName is the value of the property that keeps a CSI name
// (UserProps.CSIName, SnapshotName); DecodeName reads it back, and is the
// only reader. `zfs list -H` separates columns with tabs and rows with
// newlines and prints "-" for an unset property, so a name holding a control
// character, or "-", is kept as a Go double-quoted string ("a\tb"), and
// every other name as it is: what operators see in `zfs list -o
// name,<driver>:csi-name` stays the name. A name that is itself such a
// quoted string is quoted once more, so that no two names share a value.
//
// Versions before this encoding kept names (no control characters, never
// "-") as they are, and those values decode to themselves, except a name
// that is a double-quoted Go string of what needs quoting — like "a\tb"
// with its quotes and backslash — which now reads as the string it quotes.
func EncodeName(name string) string {
	if needsQuoting(name) {
		return strconv.Quote(name)
	}
	return name
}

// DecodeName is the CSI name a property value written by EncodeName (or by
// an earlier version) holds; "" for "" (the property is not set).
func DecodeName(value string) string {
	if len(value) < 2 || value[0] != '"' || value[len(value)-1] != '"' {
		return value
	}
	name, err := strconv.Unquote(value)
	if err != nil || !needsQuoting(name) {
		return value
	}
	return name
}

// needsQuoting reports whether a name cannot be kept as it is: it would not
// survive `zfs list -H`, or it would decode as another name. Each step of
// the recursion unquotes, so it ends.
func needsQuoting(name string) bool {
	return name == "-" || hasControl(name) || DecodeName(name) != name
}

func hasControl(name string) bool {
	return strings.ContainsFunc(name, unicode.IsControl)
}

func isAlphanumeric(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
