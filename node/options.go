package node

import (
	"fmt"
	"sort"
	"strings"
)

// mountOptions are a capability's mount_flags sorted into what the driver
// does with them.
type mountOptions struct {
	// set are per-mount flags to turn on (mountFlagBits keys); they apply to
	// the staging mount and again to every bind mount a publish makes.
	set []string
	// cleared are per-mount flags asked off explicitly ("rw" clears "ro").
	cleared []string
	// data are the filesystem's own options, given to mount(2) at stage.
	data []string
}

// perMountFlags maps the mount(8) words for per-mount flags to the flag they
// set or clear. These the kernel applies to any filesystem and to bind mounts.
var perMountFlags = map[string]struct {
	flag string
	on   bool
}{
	"ro": {"ro", true}, "rw": {"ro", false},
	"nosuid": {"nosuid", true}, "suid": {"nosuid", false},
	"nodev": {"nodev", true}, "dev": {"nodev", false},
	"noexec": {"noexec", true}, "exec": {"noexec", false},
	"noatime": {"noatime", true}, "atime": {"noatime", false},
	"nodiratime": {"nodiratime", true}, "diratime": {"nodiratime", false},
	"relatime": {"relatime", true}, "norelatime": {"relatime", false},
	"strictatime": {"strictatime", true},
}

// refusedOptions are words of mount(8) or fstab that are not mount options
// of a filesystem: the driver decides how it mounts, and fstab words mean
// nothing to mount(2).
var refusedOptions = map[string]string{
	"bind": "the driver decides bind mounts", "rbind": "the driver decides bind mounts",
	"remount": "the driver decides remounts", "move": "the driver decides mounts",
	"shared": "propagation is the host's", "rshared": "propagation is the host's",
	"slave": "propagation is the host's", "rslave": "propagation is the host's",
	"private": "propagation is the host's", "rprivate": "propagation is the host's",
	"unbindable": "propagation is the host's", "runbindable": "propagation is the host's",
	"loop": "volumes are not files", "auto": "an fstab word", "noauto": "an fstab word",
	"user": "an fstab word", "users": "an fstab word", "nouser": "an fstab word",
	"owner": "an fstab word", "group": "an fstab word", "nofail": "an fstab word", "_netdev": "an fstab word",
}

// parseMountFlags sorts a capability's mount_flags for a filesystem type
// ("zfs" for datasets) and refuses what the driver does not allow: words
// that are not mount options, suid and dev (hostFlags), and any option of
// the filesystem's own that is not in fsOptions.
func parseMountFlags(fsType string, mountFlags []string) (mountOptions, error) {
	var options mountOptions
	seen := map[string]bool{} // flag → on
	for _, entry := range mountFlags {
		for _, word := range strings.Split(entry, ",") {
			word = strings.TrimSpace(word)
			switch {
			case word == "" || word == "defaults":
				continue
			case refusedOptions[word] != "":
				return mountOptions{}, fmt.Errorf("mount flag %q cannot be honoured: %s", word, refusedOptions[word])
			case strings.HasPrefix(word, "x-"):
				return mountOptions{}, fmt.Errorf("mount flag %q cannot be honoured: userspace options mean nothing to mount(2)", word)
			case word == "suid" || word == "dev":
				return mountOptions{}, fmt.Errorf("mount flag %q cannot be honoured: the driver mounts every volume nosuid,nodev", word)
			}
			if flag, ok := perMountFlags[word]; ok {
				if on, twice := seen[flag.flag]; twice && on != flag.on {
					return mountOptions{}, fmt.Errorf("mount flags contradict each other on %q", flag.flag)
				}
				seen[flag.flag] = flag.on
				continue
			}
			if err := checkDataOption(fsType, word); err != nil {
				return mountOptions{}, err
			}
			if !contains(options.data, word) {
				options.data = append(options.data, word)
			}
		}
	}
	if seen["noatime"] && (seen["relatime"] || seen["strictatime"]) || seen["relatime"] && seen["strictatime"] {
		return mountOptions{}, fmt.Errorf("mount flags ask for more than one of noatime, relatime and strictatime")
	}
	for flag, on := range seen {
		if on {
			options.set = append(options.set, flag)
		} else {
			options.cleared = append(options.cleared, flag)
		}
	}
	sort.Strings(options.set)
	sort.Strings(options.cleared)
	return options, nil
}

// hostFlags are per-mount flags of every filesystem mount the driver makes,
// staging and publish alike: a volume's files were written by jobs, and
// neither a set-user-ID program nor a device node among them may act on
// the host (or in another job) through the mount. Raw block volumes go
// without: their device node must open, which nodev forbids.
var hostFlags = []string{"nodev", "nosuid"}

// mountFlags are the per-mount flags a filesystem mount gets: the ones
// asked for and hostFlags. Only the ones asked for are compared with an
// existing mount (mismatch), so mounts made before hostFlags existed stay
// compatible.
func (o mountOptions) mountFlags() []string {
	flags := append([]string{}, o.set...)
	for _, flag := range hostFlags {
		if !contains(flags, flag) {
			flags = append(flags, flag)
		}
	}
	sort.Strings(flags)
	return flags
}

// withReadOnly adds "ro" to the flags to set (a read-only publish).
func (o mountOptions) withReadOnly() mountOptions {
	if contains(o.set, "ro") {
		return o
	}
	o.set = append(append([]string{}, o.set...), "ro")
	sort.Strings(o.set)
	o.cleared = remove(o.cleared, "ro")
	return o
}

// readOnly reports whether the flags ask for a read-only mount.
func (o mountOptions) readOnly() bool { return contains(o.set, "ro") }

// mismatch explains how a mount differs from the per-mount flags asked for,
// or is "" when it has them all. A mount may carry flags nobody asked for
// (inherited from its parent, or the kernel's relatime default).
func (o mountOptions) mismatch(mount MountInfo) string {
	if mount.ReadOnly() != o.readOnly() {
		if mount.ReadOnly() {
			return "it is mounted read-only, the request asks for read-write"
		}
		return "it is mounted read-write, the request asks for read-only"
	}
	for _, flag := range o.set {
		switch {
		case flag == "strictatime" && (mount.HasOption("noatime") || mount.HasOption("relatime")):
			return "it is not mounted strictatime"
		case flag != "strictatime" && !mount.HasOption(flag):
			return fmt.Sprintf("it is mounted without %s", flag)
		}
	}
	for _, flag := range o.cleared {
		if flag != "ro" && mount.HasOption(flag) {
			return fmt.Sprintf("it is mounted %s", flag)
		}
	}
	return ""
}

func contains(list []string, word string) bool {
	for _, w := range list {
		if w == word {
			return true
		}
	}
	return false
}

func remove(list []string, word string) []string {
	var out []string
	for _, w := range list {
		if w != word {
			out = append(out, w)
		}
	}
	return out
}
