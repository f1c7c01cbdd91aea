package node

import (
	"fmt"
	"regexp"
	"strings"
)

// The options of its own a filesystem takes from a job's mount_flags. The
// daemon runs as root on the host and the kernel parses these options in
// the host's kernel, so a job author chooses from a list of options that
// only concern the volume itself: how it caches, journals, allocates,
// checks quotas. Anything else is refused, naming the option: options that
// point the kernel at another device (ext4's journal_path= and journal_dev=,
// xfs's logdev= and rtdev=, btrfs's device=) would feed it a block device
// the job chose, possibly crafted, and the ones that panic the host on an
// error (errors=panic, fatal_errors=panic) or skip journal recovery hand
// the host a denial of service.

// optionValue checks the value of an option ("" for a bare word).
type optionValue func(value string) bool

var (
	bare        optionValue = func(value string) bool { return value == "" }
	number      optionValue = regexp.MustCompile(`^[0-9]+$`).MatchString
	size        optionValue = regexp.MustCompile(`^[0-9]+[kKmMgG]?$`).MatchString
	compression optionValue = regexp.MustCompile(`^(|zlib|lzo|zstd|no)(:[0-9]+)?$`).MatchString
)

// oneOf allows the listed values; "" among them allows the bare word.
func oneOf(values ...string) optionValue {
	return func(value string) bool { return contains(values, value) }
}

// bareWords lists options that take no value.
func bareWords(words ...string) map[string]optionValue {
	options := map[string]optionValue{}
	for _, word := range words {
		options[word] = bare
	}
	return options
}

func with(options map[string]optionValue, more map[string]optionValue) map[string]optionValue {
	for name, value := range more {
		options[name] = value
	}
	return options
}

// commonDataOptions are the superblock flags the kernel takes from the
// option string of any filesystem (lazytime, sync, dirsync).
var commonDataOptions = []string{"lazytime", "nolazytime", "sync", "dirsync"}

// fsOptions are the options allowed per filesystem, with their values.
// OpenZFS takes only its xattr options (it ignores the rest silently, and
// the driver does not pretend to honour what it ignores); its properties
// are parameters of the volume instead.
var fsOptions = map[string]map[string]optionValue{
	"zfs": bareWords("xattr", "noxattr", "saxattr", "dirxattr"),
	"ext4": with(bareWords(append([]string{"discard", "nodiscard", "barrier", "nobarrier", "user_xattr", "nouser_xattr",
		"acl", "noacl", "delalloc", "nodelalloc", "auto_da_alloc", "noauto_da_alloc", "block_validity", "noblock_validity",
		"dioread_lock", "dioread_nolock", "i_version", "nombcache", "noinit_itable", "journal_checksum",
		"nojournal_checksum", "journal_async_commit", "grpid", "bsdgroups", "nogrpid", "sysvgroups", "quota", "noquota",
		"usrquota", "grpquota", "prjquota"}, commonDataOptions...)...),
		map[string]optionValue{"commit": number, "stripe": number, "max_batch_time": number, "min_batch_time": number,
			"init_itable": number, "inode_readahead_blks": number, "max_dir_size_kb": number,
			"data": oneOf("journal", "ordered", "writeback"), "data_err": oneOf("ignore", "abort"),
			"errors": oneOf("remount-ro", "continue")}),
	"xfs": with(bareWords(append([]string{"discard", "nodiscard", "inode32", "inode64", "largeio", "nolargeio", "wsync",
		"noalign", "attr2", "noattr2", "filestreams", "grpid", "bsdgroups", "nogrpid", "sysvgroups", "ikeep", "noikeep",
		"swalloc", "nouuid", "quota", "noquota", "uquota", "usrquota", "uqnoenforce", "qnoenforce", "gquota", "grpquota",
		"gqnoenforce", "pquota", "prjquota", "pqnoenforce"}, commonDataOptions...)...),
		map[string]optionValue{"logbufs": number, "logbsize": size, "allocsize": size, "sunit": number, "swidth": number}),
	"btrfs": with(bareWords(append([]string{"nodiscard", "ssd", "nossd", "ssd_spread", "nossd_spread",
		"autodefrag", "noautodefrag", "datacow", "nodatacow", "datasum", "nodatasum", "flushoncommit", "noflushoncommit",
		"acl", "noacl", "barrier", "nobarrier", "treelog", "notreelog"}, commonDataOptions...)...),
		map[string]optionValue{"compress": compression, "compress-force": compression, "discard": oneOf("", "sync", "async"),
			"space_cache": oneOf("v2"), "commit": number, "max_inline": size, "thread_pool": number}),
}

// refusedDataOptions say why notable options are refused; any option not
// in fsOptions is refused too, with a general reason.
var refusedDataOptions = map[string]string{
	"errors":       "it would let a filesystem error panic the host",
	"fatal_errors": "it would let a filesystem error panic the host",
	"journal_path": "it points the host kernel at another device",
	"journal_dev":  "it points the host kernel at another device",
	"logdev":       "it points the host kernel at another device",
	"rtdev":        "it points the host kernel at another device",
	"device":       "it points the host kernel at another device",
	"norecovery":   "it mounts without replaying the journal, handing the host kernel an inconsistent filesystem",
	"noload":       "it mounts without replaying the journal, handing the host kernel an inconsistent filesystem",
	"rescue":       "it mounts a damaged filesystem, which the host kernel must then trust",
	"degraded":     "a volume is one device; it has no missing ones",
	"dax":          "it maps the device into memory past the page cache",
}

// checkDataOption accepts an option of the filesystem's own, or explains
// why not.
func checkDataOption(fsType, option string) error {
	name, value, _ := strings.Cut(option, "=")
	check, ok := fsOptions[fsType][name]
	if ok && check(value) {
		return nil
	}
	if reason := refusedDataOptions[name]; reason != "" {
		return fmt.Errorf("mount flag %q is refused: %s", option, reason)
	}
	if ok {
		return fmt.Errorf("mount flag %q has a value the driver does not allow on %s", option, fsDescription(fsType))
	}
	return fmt.Errorf("mount flag %q is not one the driver allows on %s", option, fsDescription(fsType))
}

func fsDescription(fsType string) string {
	if fsType == "zfs" {
		return "a ZFS dataset (it takes the per-mount flags and xattr, noxattr, saxattr, dirxattr; set ZFS properties as parameters instead)"
	}
	return fsType
}
