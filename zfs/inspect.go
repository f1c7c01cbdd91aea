package zfs

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Inspector reads one dataset's identity: what the ownership guard and
// staging need to know of a volume. Exec reads it in-process with the ioctl
// zfs itself uses (ZFS_IOC_OBJSET_STATS on /dev/zfs) and runs `zfs list`
// only when that read cannot answer for certain: under emulation a process
// start alone costs more than the whole read (docs/benchmarks.md).
type Inspector interface {
	// Inspect reports name (a filesystem, volume or snapshot) with the
	// InspectedFields filled and every other field zero, or ErrNotFound.
	// userProps are read as List reads them: set here or inherited, unset
	// ones and ones set to "-" absent.
	Inspect(ctx context.Context, name string, userProps []string) (Dataset, error)
}

// InspectedFields names the Dataset fields Inspect fills, each as
// GetWithKeyStatus reads it: Name, Type, Origin, KeyStatus, EncryptionRoot
// and User. The others (sizes, creation, readonly, clones, …) are zero: a
// caller that needs them lists the dataset.
const InspectedFields = "Name, Type, Origin, KeyStatus, EncryptionRoot, User"

// Inspect reads name's InspectedFields through z's Inspect when z has one,
// and through GetWithKeyStatus (one zfs list) when not, keeping only those
// fields either way, so that a caller cannot come to rely on others.
func Inspect(ctx context.Context, z Interface, name string, userProps []string) (Dataset, error) {
	if inspector, ok := z.(Inspector); ok {
		return inspector.Inspect(ctx, name, userProps)
	}
	row, err := GetWithKeyStatus(ctx, z, name, userProps)
	if err != nil {
		return Dataset{}, err
	}
	return Inspected(row), nil
}

// Inspected keeps a listed row's InspectedFields.
func Inspected(row Dataset) Dataset {
	return Dataset{Name: row.Name, Type: row.Type, Origin: row.Origin, KeyStatus: row.KeyStatus,
		EncryptionRoot: row.EncryptionRoot, User: row.User}
}

var _ Inspector = (*Exec)(nil)

// Inspect implements Inspector: the ioctl, and `zfs list` (GetWithKeyStatus)
// whenever the ioctl's answer is not certain. ENOENT is ErrNotFound, as zfs
// list says it. Anything else falls back: another errno (a suspended pool is
// EAGAIN, a name the kernel refuses EINVAL), no /dev/zfs, an answer that
// does not decode or whose two halves (the stats struct and the property
// list) disagree, a value zfs list would print differently or not at all,
// and a name or property zfs would refuse or treat apart. So the fast path
// never answers what the command would refuse; the fallback's zfs list is
// counted and logged as every command is.
func (e *Exec) Inspect(ctx context.Context, name string, userProps []string) (Dataset, error) {
	if !inspectable(name, userProps) {
		return e.inspectByList(ctx, name, userProps, errors.New("a name or property zfs list treats apart"))
	}
	stats, packed, err := e.objsetStats(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return Dataset{}, err
	}
	if err == nil {
		var props nvList
		if props, err = decodeNVListOf(packed, inspectedProps(userProps)); err == nil {
			var row Dataset
			if row, err = objsetDataset(name, stats, props, userProps); err == nil {
				return row, nil
			}
		}
	}
	if ctx.Err() != nil {
		return Dataset{}, err
	}
	return e.inspectByList(ctx, name, userProps, err)
}

// inspectByList is Inspect's fallback. Its log line is debug, except for
// the first misfit an Exec meets (an answer that does not decode, or not in
// the form this code knows): a warning, since every later read of this ZFS
// will likely fall back too and cost a process.
func (e *Exec) inspectByList(ctx context.Context, name string, userProps []string, why error) (Dataset, error) {
	event := e.cfg.Logger.Debug()
	if (errors.Is(why, errNVList) || errors.Is(why, errObjsetMisfit)) && e.inspectMisfit.CompareAndSwap(false, true) {
		event = e.cfg.Logger.Warn()
	}
	event.Str("dataset", name).Str("reason", why.Error()).Msg("reading a dataset with zfs list instead of ZFS_IOC_OBJSET_STATS")
	row, err := GetWithKeyStatus(ctx, e, name, userProps)
	if err != nil {
		return Dataset{}, err
	}
	return Inspected(row), nil
}

// objsetStats is the part of zfs_cmd_t's zc_objset_stats (dmu_objset_stats_t,
// include/sys/dmu.h) that Inspect reads.
type objsetStats struct {
	creationTxg  uint64
	guid         uint64
	objsetType   uint32 // dmu_objset_type_t
	snapshot     bool
	inconsistent bool
	origin       string
}

// The objset types of dmu_objset_type_t that are datasets.
const (
	objsetTypeZFS  = 2 // DMU_OST_ZFS
	objsetTypeZvol = 3 // DMU_OST_ZVOL
)

// errObjsetSurprise is an answer of the ioctl that Inspect does not take:
// Exec falls back to zfs list. errObjsetMisfit, among them, is an answer in
// a form this code was not written for (a ZFS whose zfs_cmd_t or property
// list changed): the fast path may not fit this ZFS at all, which the
// daemon's log says once.
var (
	errObjsetSurprise = errors.New("ZFS_IOC_OBJSET_STATS answered what Inspect does not read")
	errObjsetMisfit   = errors.New("an answer in a form this code does not know")
)

// objsetDataset turns the ioctl's answer into the row zfs list would print,
// by libzfs's rules (lib/libzfs/libzfs_dataset.c, OpenZFS 2.1.11 and 2.3):
//
//   - type: from the stats struct, as make_dataset_handle_common decides it
//     (a snapshot, else a zvol or filesystem by dds_type);
//   - origin: the origin property (2.1), or dds_origin when set (2.3): the
//     kernel fills both from dsl_dir_get_origin, and they must agree; none
//     for a snapshot (zfs_prop_get: origin is not a snapshot's property);
//   - keystatus and encryptionroot: the properties dsl_dataset_crypt_stats
//     adds for an encrypted dataset; absent, zfs list prints "-" (read-only
//     properties without a value);
//   - user properties: the value of each requested one (set or inherited,
//     dsl_prop_get_all), "-" as unset as List reads it.
//
// The struct and the property list come from two places in the kernel; the
// type, createtxg and guid both carry must agree, or the layout of zfs_cmd_t
// is not what this code was written for.
func objsetDataset(name string, stats objsetStats, props nvList, userProps []string) (Dataset, error) {
	// A misfit is an answer in a form this code was not written for; the
	// others (a receive in progress, a value zfs list cannot print) are
	// ZFS's ordinary answers that Inspect leaves to zfs list.
	misfit := func(format string, args ...any) (Dataset, error) {
		return Dataset{}, fmt.Errorf("%w: %w: %s: %s", errObjsetSurprise, errObjsetMisfit, name, fmt.Sprintf(format, args...))
	}
	apart := func(format string, args ...any) (Dataset, error) {
		return Dataset{}, fmt.Errorf("%w: %s: %s", errObjsetSurprise, name, fmt.Sprintf(format, args...))
	}
	typeProp, _ := propValue(props, "type").(uint64)
	txg, _ := propValue(props, "createtxg").(uint64)
	guid, _ := propValue(props, "guid").(uint64)
	switch {
	case stats.inconsistent:
		return apart("inconsistent (a receive in progress)")
	case typeProp != uint64(stats.objsetType) || txg != stats.creationTxg || guid != stats.guid:
		return misfit("the stats (type %d, createtxg %d, guid %d) and the properties (%d, %d, %d) disagree",
			stats.objsetType, stats.creationTxg, stats.guid, typeProp, txg, guid)
	case stats.snapshot != strings.Contains(name, "@"):
		return misfit("snapshot flag %v", stats.snapshot)
	}
	row := Dataset{Name: name}
	switch {
	case stats.snapshot:
		row.Type = Snapshot
	case stats.objsetType == objsetTypeZvol:
		row.Type = Volume
	case stats.objsetType == objsetTypeZFS:
		row.Type = Filesystem
	default:
		return misfit("objset type %d", stats.objsetType)
	}
	origin, hasOrigin := propValue(props, "origin").(string)
	switch {
	case propValue(props, "origin") != nil && !hasOrigin:
		return misfit("origin is not a string")
	case row.Type == Snapshot && (stats.origin != "" || hasOrigin):
		return misfit("a snapshot with an origin")
	case stats.origin != "" && origin != stats.origin:
		// 2.3 prints dds_origin, 2.1 the property: they must agree.
		return misfit("origin %q in the stats, %q in the properties", stats.origin, origin)
	}
	row.Origin = origin
	switch status := propValue(props, "keystatus"); status {
	case nil:
	case uint64(1): // ZFS_KEYSTATUS_UNAVAILABLE
		row.KeyStatus = "unavailable"
	case uint64(2): // ZFS_KEYSTATUS_AVAILABLE
		row.KeyStatus = "available"
	default:
		return misfit("keystatus %v", status)
	}
	if root := propValue(props, "encryptionroot"); root != nil {
		text, ok := root.(string)
		if !ok || text == "" {
			return misfit("encryptionroot %v", root)
		}
		row.EncryptionRoot = text
	}
	for _, prop := range userProps {
		raw := propValue(props, prop)
		value, ok := raw.(string)
		switch {
		case raw == nil || value == "-":
			continue
		case !ok:
			return misfit("%s is not a string", prop)
		case strings.ContainsAny(value, "\t\n"):
			// zfs list -H cannot print it; List refuses the row.
			return apart("the value of %s holds a tab or newline", prop)
		}
		if row.User == nil {
			row.User = make(map[string]string, len(userProps))
		}
		row.User[prop] = value
	}
	return row, nil
}

// inspectedProps names the properties objsetDataset reads: those the
// answer is decoded for.
func inspectedProps(userProps []string) map[string]bool {
	keep := make(map[string]bool, len(systemInspected)+len(userProps))
	for _, name := range systemInspected {
		keep[name] = true
	}
	for _, name := range userProps {
		keep[name] = true
	}
	return keep
}

// systemInspected are the native properties objsetDataset reads.
var systemInspected = []string{"type", "createtxg", "guid", "origin", "keystatus", "encryptionroot"}

// propValue is the value of a property in the ioctl's answer (each
// property is a list of its value and source), nil when absent. A property
// that is not such a list is nvSkipped, which no caller takes.
func propValue(props nvList, name string) any {
	property, ok := props[name]
	if !ok {
		return nil
	}
	list, ok := property.(nvList)
	if !ok {
		return nvSkipped{}
	}
	value, ok := list["value"]
	if !ok {
		return nvSkipped{}
	}
	return value
}

// inspectable reports whether the ioctl answers for name and userProps
// exactly as zfs list would. zfs checks names in userspace before its ioctl
// (zfs_validate_name, zcommon/zfs_namecheck.c) and refuses some the kernel
// would answer for (a bookmark's '#', a pool name without its letter); and
// it lists only user property names (zfs_prop_user: lowercase letters,
// digits, "-_.:", with a colon). Names outside the plain forms go to zfs
// list, which says what it thinks of them.
func inspectable(name string, userProps []string) bool {
	for _, prop := range userProps {
		if !userPropertyName(prop) {
			return false
		}
	}
	if len(name) >= maxDatasetName {
		return false
	}
	dataset, snapshot, isSnapshot := strings.Cut(name, "@")
	if isSnapshot && !nameComponent(snapshot) {
		return false
	}
	components := strings.Split(dataset, "/")
	pool := components[0]
	if pool == "" || len(pool) >= maxPoolName || pool == "mirror" || pool == "raidz" || pool == "draid" ||
		!(pool[0] >= 'a' && pool[0] <= 'z' || pool[0] >= 'A' && pool[0] <= 'Z') {
		return false
	}
	for _, component := range components {
		if !nameComponent(component) {
			return false
		}
	}
	return true
}

// Name limits of ZFS: ZFS_MAX_DATASET_NAME_LEN, and a pool's (pool_namecheck
// keeps room for "pool/$ORIGIN@$ORIGIN").
const (
	maxDatasetName = 256
	maxPoolName    = maxDatasetName - 2 - 2*len("$ORIGIN")
)

// nameComponent: not empty, not "." or "..", and only the characters ZFS
// allows in a component (valid_char in zfs_namecheck.c).
func nameComponent(component string) bool {
	if component == "" || component == "." || component == ".." {
		return false
	}
	for i := range len(component) {
		c := component[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.: ", c) >= 0) {
			return false
		}
	}
	return true
}

// userPropertyName is zfs_prop_user's rule, within ZAP's name limit.
func userPropertyName(name string) bool {
	if len(name) >= maxDatasetName || !strings.Contains(name, ":") {
		return false
	}
	for i := range len(name) {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:", c) >= 0) {
			return false
		}
	}
	return true
}
