package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// StorageClass / volume-spec parameters.
const (
	ParamParentDataset = "parentDataset" // an allowed parent; default: the first
	ParamThin          = "thin"          // "true": no reservation (sparse)
	ParamVolBlockSize  = "volblocksize"  // zvols: block size in bytes (power of two, 512..128Ki)
	ParamSourceMode    = "sourceMode"    // "clone" (default), "copy": independent copy by send/receive, moves are the operator's (ctl move-volume), refused here
	ParamEncryption    = "encryption"    // "on" or a cipher (aes-256-gcm, …): native encryption, key from the secrets
	PropertyPrefix     = "zfs."          // "zfs.<property>": a native or user ZFS property
	kubernetesPrefix   = "csi.storage.k8s.io/"
)

// propertyRule says where a native ZFS property may be set through parameters.
type propertyRule struct {
	filesystem, volume bool
	mutable            bool // may change after creation (ControllerModifyVolume)
}

var (
	both       = propertyRule{filesystem: true, volume: true, mutable: true}
	fsOnly     = propertyRule{filesystem: true, mutable: true}
	fsCreate   = propertyRule{filesystem: true}
	volumeOnly = propertyRule{volume: true, mutable: true}
)

// settableProperties are the native properties users may set. Everything the
// driver relies on is absent, and listed in driverOwned with the reason.
var settableProperties = map[string]propertyRule{
	"compression": both, "checksum": both, "sync": both, "logbias": both, "primarycache": both,
	"secondarycache": both, "dedup": both, "copies": both, "redundant_metadata": both,
	"recordsize": fsOnly, "atime": fsOnly, "relatime": fsOnly, "xattr": fsOnly, "acltype": fsOnly,
	"snapdir": fsOnly, "exec": fsOnly, "setuid": fsOnly, "devices": fsOnly, "dnodesize": fsOnly,
	"special_small_blocks": fsOnly, "aclinherit": fsOnly, "aclmode": fsOnly,
	"normalization": fsCreate, "casesensitivity": fsCreate, "utf8only": fsCreate,
	"volmode": volumeOnly, "snapdev": volumeOnly,
}

// poolProperties spend what every volume of a pool shares, so a volume may
// set them only where the operator allows it (rules.Config's
// AllowedPoolProperties, the daemon's --allow-pool-properties). Each comes
// with the value that spends nothing beyond ZFS's default: that one is open
// to every volume, so turning one of them off never needs the operator.
//
// Left out on purpose, as they spend only the volume's own share:
// redundant_metadata (all is the default; the other values keep fewer copies
// of this volume's metadata), checksum (this volume's CPU and integrity; the
// dedup table's checksum is the dedup value's), primarycache and
// secondarycache (all is the default: a volume can only cache less), sync and
// logbias (the volume's own durability and latency; sync=always writes
// through the ZIL as any fsync-heavy workload does), compression and
// recordsize (the volume's CPU and block size).
var poolProperties = map[string]struct{ harmless, spends string }{
	// Every block written enters the pool's one dedup table: memory (ARC) and
	// I/O on every write and free in the pool, for as long as the block lives.
	"dedup": {"off", "every block it writes enters the pool's dedup table, which costs memory and I/O for the whole pool"},
	// N copies of every block: N times the writes, and N times the space of a
	// thick zvol's reservation, a thin zvol and the snapshots (a dataset's
	// refquota counts its copies but caps neither of those).
	"copies": {"1", "every block is written that many times, multiplying the pool's space and writes it takes"},
	// The special vdev holds the whole pool's metadata: once small blocks
	// fill it, every volume's metadata spills to the slower main vdevs.
	"special_small_blocks": {"0", "its small blocks fill the special vdev that holds the whole pool's metadata"},
}

// PoolPropertyNames are the properties an operator can allow volumes to set
// (rules.Config's AllowedPoolProperties), sorted.
func PoolPropertyNames() []string {
	names := make([]string, 0, len(poolProperties))
	for name := range poolProperties {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// CheckAllowedPoolProperties refuses an operator's allowance that names
// anything but PoolPropertyNames: a typo would otherwise allow nothing, silently.
func CheckAllowedPoolProperties(names []string) error {
	for _, name := range names {
		if _, known := poolProperties[name]; !known {
			return fmt.Errorf("--%s: %q is none of the properties that spend the whole pool (%s); the others need no allowance",
				AllowPoolPropertiesFlag, name, strings.Join(PoolPropertyNames(), ", "))
		}
	}
	return nil
}

// The daemon option that allows poolProperties, named in the refusals.
const (
	AllowPoolPropertiesFlag = "allow-pool-properties"
	AllowPoolPropertiesEnv  = "ZFS_CSI_ALLOW_POOL_PROPERTIES"
)

var driverOwned = map[string]string{
	"mountpoint":     "the node service mounts datasets itself (mountpoint=legacy)",
	"canmount":       "the node service mounts datasets itself (mountpoint=legacy)",
	"refquota":       "it is the volume size: use the capacity request",
	"quota":          "the volume size is enforced by refquota: use the capacity request",
	"volsize":        "it is the volume size: use the capacity request",
	"refreservation": "use the thin parameter",
	"reservation":    "use the thin parameter",
	"volblocksize":   "use the volblocksize parameter",
	"readonly":       "read-only access is a property of the publish request",
	"encryption":     "use the encryption parameter, with the key in the secrets",
	"keyformat":      "it follows the secret that carries the key (encryptionPassphrase or encryptionKey)",
	"keylocation":    "keys reach zfs on stdin (keylocation=prompt), never from a file",
	"pbkdf2iters":    "the driver keeps ZFS's default",
	"zoned":          "zoned datasets are not supported",
	"sharenfs":       "volumes are node-local",
	"sharesmb":       "volumes are node-local",
}

// encryptionValues are the values of the encryption parameter, as zfs
// takes them for the encryption property.
var encryptionValues = map[string]bool{"on": true, "off": true, "aes-128-ccm": true, "aes-192-ccm": true, "aes-256-ccm": true,
	"aes-128-gcm": true, "aes-192-gcm": true, "aes-256-gcm": true}

// createParams are the validated parameters of a CreateVolume request.
type createParams struct {
	parent       string
	thin         bool
	volBlockSize uint64
	copySource   bool
	encryption   string            // "" for none, "on" or a cipher
	properties   map[string]string // zfs.<property> from parameters and mutable_parameters
	metadata     map[string]string // driver user property → CO metadata (PVC name, …)
	hash         string            // fingerprint of everything above, for idempotency
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// propertyPolicy is what decides which ZFS properties a request may set:
// the volume's kind, the driver's own properties, and the pool-wide ones the
// operator allows.
type propertyPolicy struct {
	props   rules.UserProps
	allowed []string // rules.Config's AllowedPoolProperties
	zvol    bool
}

func newPropertyPolicy(cfg rules.Config, props rules.UserProps, zvol bool) propertyPolicy {
	return propertyPolicy{props: props, allowed: cfg.AllowedPoolProperties, zvol: zvol}
}

// parseCreateParams validates parameters and mutable_parameters for a volume
// that will be a zvol or not.
func parseCreateParams(cfg rules.Config, props rules.UserProps, parameters, mutable map[string]string, zvol bool) (createParams, error) {
	p := createParams{parent: cfg.ParentDatasets[0], properties: map[string]string{}, metadata: map[string]string{}}
	policy := newPropertyPolicy(cfg, props, zvol)
	for key, value := range parameters {
		var err error
		switch {
		case key == ParamParentDataset:
			if !cfg.IsParent(value) {
				err = invalid("parameter %s=%q is not one of the allowed parent datasets %v", key, rules.Bounded(value), cfg.ParentDatasets)
			}
			p.parent = value
		case key == ParamThin:
			p.thin, err = strconv.ParseBool(value)
			if err != nil {
				err = invalid("parameter %s=%q must be true or false", key, rules.Bounded(value))
			}
		case key == ParamVolBlockSize:
			p.volBlockSize, err = parseVolBlockSize(value, zvol)
		case key == ParamSourceMode:
			switch value {
			case "clone", "copy":
			case moveSync, moveFinal:
				// Deleting the source is the operator's act on the hosts,
				// never a parameter any CO caller can set.
				err = invalid("parameter %s=%s: moves are not a CSI parameter; the operator moves a volume with `zfs-csi ctl move-volume` on the node it moves to, where moves are enabled (--allow-moves)", key, value)
			default:
				err = invalid("parameter %s=%q must be clone or copy", key, rules.Bounded(value))
			}
			p.copySource = value == "copy"
		case key == ParamEncryption:
			if !encryptionValues[value] {
				err = invalid("parameter %s=%q must be on, off or one of aes-128-ccm, aes-192-ccm, aes-256-ccm, aes-128-gcm, aes-192-gcm, aes-256-gcm", key, rules.Bounded(value))
			}
			if value != "off" {
				p.encryption = value
			}
		case strings.HasPrefix(key, PropertyPrefix):
			err = addProperty(p.properties, policy, strings.TrimPrefix(key, PropertyPrefix), value, false)
		case strings.HasPrefix(key, kubernetesPrefix):
			if name := metadataProperty(props, key); name != "" {
				p.metadata[name] = value
			}
		default:
			err = invalid("unknown parameter %q (known: %s, %s, %s, %s and %s<property>)",
				rules.Bounded(key), ParamParentDataset, ParamThin, ParamVolBlockSize, ParamSourceMode+", "+ParamEncryption, PropertyPrefix)
		}
		if err != nil {
			return createParams{}, err
		}
	}
	// A mutable parameter overrides the same property among parameters (the
	// spec: mutable_parameters take precedence).
	if err := addMutable(p.properties, policy, mutable); err != nil {
		return createParams{}, err
	}
	p.hash = fingerprint(parameters, mutable)
	return p, nil
}

// parseMutable validates ControllerModifyVolume's mutable_parameters, under
// the same rules as at creation.
func parseMutable(policy propertyPolicy, mutable map[string]string) (map[string]string, error) {
	if len(mutable) == 0 {
		return nil, invalid("mutable_parameters are required")
	}
	properties := map[string]string{}
	if err := addMutable(properties, policy, mutable); err != nil {
		return nil, err
	}
	return properties, nil
}

// addMutable validates mutable_parameters into properties: only
// zfs.<property>, and only properties that may change after creation.
func addMutable(properties map[string]string, policy propertyPolicy, mutable map[string]string) error {
	for key, value := range mutable {
		property, ok := strings.CutPrefix(key, PropertyPrefix)
		if !ok {
			return invalid("unknown mutable parameter %q: only %s<property> can change", rules.Bounded(key), PropertyPrefix)
		}
		if err := addProperty(properties, policy, property, value, true); err != nil {
			return err
		}
	}
	return nil
}

// addProperty validates one ZFS property request and adds it to properties.
func addProperty(properties map[string]string, policy propertyPolicy, name, value string, mustBeMutable bool) error {
	if strings.ContainsAny(value, "\t\n\x00") || len(value) > 8191 {
		return invalid("property %s: the value must be at most 8191 bytes without tabs, newlines or NUL", rules.Bounded(name))
	}
	if strings.Contains(name, ":") {
		if policy.props.Owns(name) {
			return invalid("property %s belongs to the driver and cannot be set", rules.Bounded(name))
		}
		if !validUserProperty(name) {
			return invalid("user property %q must be lower case letters, digits and ':+._-', with a ':', at most 256 bytes", rules.Bounded(name))
		}
		properties[name] = value
		return nil
	}
	if reason, owned := driverOwned[name]; owned {
		return invalid("property %s cannot be set: %s", name, reason)
	}
	rule, known := settableProperties[name]
	switch {
	case !known:
		return invalid("%q is not a ZFS property that can be set on a volume", rules.Bounded(name))
	case policy.zvol && !rule.volume:
		return invalid("property %s applies to filesystems, not to zvols", name)
	case !policy.zvol && !rule.filesystem:
		return invalid("property %s applies to zvols, not to filesystems", name)
	case mustBeMutable && !rule.mutable:
		return invalid("property %s can only be set when the volume is created", name)
	case value == "":
		return invalid("property %s needs a value", name)
	}
	if pool, spends := poolProperties[name]; spends && value != pool.harmless && !slices.Contains(policy.allowed, name) {
		return invalid("property %s=%s is the operator's to allow: %s; the daemon accepts it with --%s=%s (%s), %s=%s is always accepted",
			name, rules.Bounded(value), pool.spends, AllowPoolPropertiesFlag, name, AllowPoolPropertiesEnv, name, pool.harmless)
	}
	properties[name] = value
	return nil
}

func validUserProperty(name string) bool {
	if len(name) > 256 || strings.HasPrefix(name, ":") {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune(":+._-", r)) {
			return false
		}
	}
	return true
}

func parseVolBlockSize(value string, zvol bool) (uint64, error) {
	if !zvol {
		return 0, invalid("parameter %s applies to zvols (block access or ext4/xfs/btrfs), not to datasets", ParamVolBlockSize)
	}
	size, err := zfs.ParseSize(value)
	if err != nil || size < 512 || size > 128<<10 || size&(size-1) != 0 {
		return 0, invalid("parameter %s=%q must be a power of two from 512 to 128K", ParamVolBlockSize, rules.Bounded(value))
	}
	return size, nil
}

// metadataProperty maps the CO metadata external-provisioner passes
// (--extra-create-metadata) to the user property keeping it; other
// csi.storage.k8s.io/ keys are the provisioner's own and are ignored.
func metadataProperty(props rules.UserProps, key string) string {
	switch strings.TrimPrefix(key, kubernetesPrefix) {
	case "pvc/name":
		return props.PVCName
	case "pvc/namespace":
		return props.PVCNamespace
	case "pv/name":
		return props.PVName
	}
	return ""
}

// fingerprint identifies the parameters that shape a volume; CO metadata is
// left out so a retried request from another provisioner instance still matches.
func fingerprint(parameters, mutable map[string]string) string {
	var lines []string
	for key, value := range parameters {
		if !strings.HasPrefix(key, kubernetesPrefix) {
			lines = append(lines, "p "+key+"="+value)
		}
	}
	for key, value := range mutable {
		lines = append(lines, "m "+key+"="+value)
	}
	sort.Strings(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:8])
}

// describe is a short human description of a volume kind for messages.
func describe(zvol bool, fsType string) string {
	switch {
	case !zvol:
		return "a dataset"
	case fsType == "":
		return "a raw block zvol"
	default:
		return fmt.Sprintf("a zvol formatted %s", fsType)
	}
}
