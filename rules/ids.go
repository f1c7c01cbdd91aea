package rules

import (
	"errors"
	"strings"
)

// IDs are "host:path", like scp (ARCHITECTURE.md decision 3): a volume ID is
// "<node-id>:<dataset>", a snapshot ID "<node-id>:<dataset>@<snapshot>". The
// node part lets any instance tell which host owns a volume.

// MaxIDLength is the CSI size limit for volume and snapshot IDs.
const MaxIDLength = 128

// ErrMalformedID means an ID is not one this driver could have issued.
var ErrMalformedID = errors.New("malformed ID")

// VolumeID formats the ID of a volume.
func VolumeID(nodeID, dataset string) string { return nodeID + ":" + dataset }

// SnapshotID formats the ID of a snapshot ("dataset@snap").
func SnapshotID(nodeID, snapshot string) string { return nodeID + ":" + snapshot }

// GroupSnapshotID formats the ID of a group snapshot: its members are the
// snapshots "<dataset>@<snapshot>" of one pool that carry the group's mark.
// '#' (ZFS's bookmark separator) appears in no volume or snapshot ID.
func GroupSnapshotID(nodeID, pool, snapshot string) string {
	return nodeID + ":" + pool + "#" + snapshot
}

// ParseGroupSnapshotID splits a group snapshot ID into node, pool and the
// members' snapshot name.
func ParseGroupSnapshotID(id string) (nodeID, pool, snapshot string, err error) {
	if len(id) > MaxIDLength {
		return "", "", "", ErrMalformedID
	}
	nodeID, rest, found := strings.Cut(id, ":")
	pool, snapshot, hashed := strings.Cut(rest, "#")
	if !found || !hashed || !nodeIDPattern.MatchString(nodeID) || strings.ContainsAny(pool, "/@") ||
		strings.ContainsAny(snapshot, "/@#") || !validDatasetPath(pool) || !validDatasetPath(snapshot) {
		return "", "", "", ErrMalformedID
	}
	return nodeID, pool, snapshot, nil
}

// ParseVolumeID splits a volume ID into node and dataset.
func ParseVolumeID(id string) (nodeID, dataset string, err error) {
	nodeID, dataset, err = splitID(id)
	if err != nil || strings.Contains(dataset, "@") {
		return "", "", ErrMalformedID
	}
	return nodeID, dataset, nil
}

// ParseSnapshotID splits a snapshot ID into node, dataset and full snapshot name.
func ParseSnapshotID(id string) (nodeID, dataset, snapshot string, err error) {
	nodeID, snapshot, err = splitID(id)
	if err != nil {
		return "", "", "", ErrMalformedID
	}
	dataset, name, found := strings.Cut(snapshot, "@")
	if !found || dataset == "" || name == "" || strings.ContainsAny(name, "@/") {
		return "", "", "", ErrMalformedID
	}
	return nodeID, dataset, snapshot, nil
}

func splitID(id string) (nodeID, path string, err error) {
	if len(id) > MaxIDLength {
		return "", "", ErrMalformedID
	}
	nodeID, path, found := strings.Cut(id, ":")
	if !found || !nodeIDPattern.MatchString(nodeID) || !validDatasetPath(path) {
		return "", "", ErrMalformedID
	}
	return nodeID, path, nil
}

// validDatasetPath accepts "pool/a/b" and "pool/a/b@snap" made of the
// characters ZFS allows, with no empty, "." or ".." components.
func validDatasetPath(path string) bool {
	if path == "" || strings.Count(path, "@") > 1 {
		return false
	}
	for _, component := range strings.FieldsFunc(path, func(r rune) bool { return r == '/' || r == '@' }) {
		if component == "." || component == ".." {
			return false
		}
		for _, r := range component {
			if !zfsNameChar(r) {
				return false
			}
		}
	}
	return !strings.Contains(path, "//") && !strings.HasPrefix(path, "/") && !strings.HasSuffix(path, "/") &&
		!strings.HasSuffix(path, "@") && !strings.Contains(path, "/@") && !strings.Contains(path, "@/")
}

func zfsNameChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.' || r == ':'
}
