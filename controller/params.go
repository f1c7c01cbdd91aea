package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/driver"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// StorageClass / volume-spec parameters.
const (
	ParamParentDataset = "parentDataset" // an allowed parent; default: the first
	ParamThin          = "thin"          // "true": no reservation (sparse)
	ParamVolBlockSize  = "volblocksize"  // zvols: block size in bytes (power of two, 512..128Ki)
	ParamSourceMode    = "sourceMode"    // "clone" (default) or "copy": independent copy by send/receive
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

// parseCreateParams validates parameters and mutable_parameters for a volume
// that will be a zvol or not.
func parseCreateParams(cfg driver.Config, props driver.UserProps, parameters, mutable map[string]string, zvol bool) (createParams, error) {
	p := createParams{parent: cfg.ParentDatasets[0], properties: map[string]string{}, metadata: map[string]string{}}
	for key, value := range parameters {
		var err error
		switch {
		case key == ParamParentDataset:
			if !cfg.IsParent(value) {
				err = invalid("parameter %s=%q is not one of the allowed parent datasets %v", key, value, cfg.ParentDatasets)
			}
			p.parent = value
		case key == ParamThin:
			p.thin, err = strconv.ParseBool(value)
			if err != nil {
				err = invalid("parameter %s=%q must be true or false", key, value)
			}
		case key == ParamVolBlockSize:
			p.volBlockSize, err = parseVolBlockSize(value, zvol)
		case key == ParamSourceMode:
			if value != "clone" && value != "copy" {
				err = invalid("parameter %s=%q must be clone or copy", key, value)
			}
			p.copySource = value == "copy"
		case key == ParamEncryption:
			if !encryptionValues[value] {
				err = invalid("parameter %s=%q must be on, off or one of aes-128-ccm, aes-192-ccm, aes-256-ccm, aes-128-gcm, aes-192-gcm, aes-256-gcm", key, value)
			}
			if value != "off" {
				p.encryption = value
			}
		case strings.HasPrefix(key, PropertyPrefix):
			err = addProperty(p.properties, props, strings.TrimPrefix(key, PropertyPrefix), value, zvol, false)
		case strings.HasPrefix(key, kubernetesPrefix):
			if name := metadataProperty(props, key); name != "" {
				p.metadata[name] = value
			}
		default:
			err = invalid("unknown parameter %q (known: %s, %s, %s, %s and %s<property>)",
				key, ParamParentDataset, ParamThin, ParamVolBlockSize, ParamSourceMode+", "+ParamEncryption, PropertyPrefix)
		}
		if err != nil {
			return createParams{}, err
		}
	}
	for key, value := range mutable {
		property, ok := strings.CutPrefix(key, PropertyPrefix)
		if !ok {
			return createParams{}, invalid("unknown mutable parameter %q: only %s<property> can change", key, PropertyPrefix)
		}
		// A mutable parameter overrides the same property among parameters
		// (the spec: mutable_parameters take precedence).
		if err := addProperty(p.properties, props, property, value, zvol, true); err != nil {
			return createParams{}, err
		}
	}
	p.hash = fingerprint(parameters, mutable)
	return p, nil
}

// parseMutable validates ControllerModifyVolume's mutable_parameters.
func parseMutable(props driver.UserProps, mutable map[string]string, zvol bool) (map[string]string, error) {
	if len(mutable) == 0 {
		return nil, invalid("mutable_parameters are required")
	}
	properties := map[string]string{}
	for key, value := range mutable {
		property, ok := strings.CutPrefix(key, PropertyPrefix)
		if !ok {
			return nil, invalid("unknown mutable parameter %q: only %s<property> can change", key, PropertyPrefix)
		}
		if err := addProperty(properties, props, property, value, zvol, true); err != nil {
			return nil, err
		}
	}
	return properties, nil
}

// addProperty validates one ZFS property request and adds it to properties.
func addProperty(properties map[string]string, props driver.UserProps, name, value string, zvol, mustBeMutable bool) error {
	if strings.ContainsAny(value, "\t\n\x00") || len(value) > 8191 {
		return invalid("property %s: the value must be at most 8191 bytes without tabs, newlines or NUL", name)
	}
	if strings.Contains(name, ":") {
		if props.Owns(name) {
			return invalid("property %s belongs to the driver and cannot be set", name)
		}
		if !validUserProperty(name) {
			return invalid("user property %q must be lower case letters, digits and ':+._-', with a ':', at most 256 bytes", name)
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
		return invalid("%q is not a ZFS property that can be set on a volume", name)
	case zvol && !rule.volume:
		return invalid("property %s applies to filesystems, not to zvols", name)
	case !zvol && !rule.filesystem:
		return invalid("property %s applies to zvols, not to filesystems", name)
	case mustBeMutable && !rule.mutable:
		return invalid("property %s can only be set when the volume is created", name)
	case value == "":
		return invalid("property %s needs a value", name)
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
		return 0, invalid("parameter %s=%q must be a power of two from 512 to 128K", ParamVolBlockSize, value)
	}
	return size, nil
}

// metadataProperty maps the CO metadata external-provisioner passes
// (--extra-create-metadata) to the user property keeping it; other
// csi.storage.k8s.io/ keys are the provisioner's own and are ignored.
func metadataProperty(props driver.UserProps, key string) string {
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
