package node

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A zvol's /dev/zvol link is made by udev, after the kernel's own device
// node (/dev/zdN, made by devtmpfs as the zvol appears): udev runs zvol_id,
// which asks the node for its dataset's name with the BLKZNAME ioctl. With
// many zvols made at once on a loaded host, udev's queue holds the link back
// for a minute and more (twenty claims at once in a TCG guest
// made every NodeStageVolume time out). Staging does not wait for udev when
// it need not: after linkGrace without the link, it asks the nodes itself,
// as zvol_id does.

// blkZName is OpenZFS's BLKZNAME, _IOR(0x12, 125, char[256]) (include/sys/
// fs/zfs.h): the zvol's dataset name, NUL-terminated, into a 256-byte buffer
// (ZFS_MAX_DATASET_NAME_LEN).
const blkZName = 2<<30 | 256<<16 | 0x12<<8 | 125

// zvolNodeName matches the kernel's zvol nodes in /sys/block: zd0, zd16, …
// (a zvol's partitions are below its own entry, not here).
var zvolNodeName = regexp.MustCompile(`^zd[0-9]+$`)

// zvolNodes finds zvol device nodes by their dataset's name and remembers
// what it found until udev's link takes over.
type zvolNodes struct {
	sysBlock, dev string
	// name asks a device node for its zvol's dataset name (BLKZNAME).
	name func(node string) (string, error)

	mu    sync.Mutex
	found map[string]string // dataset → /dev/zdN, for datasets without a link
}

func newZvolNodes() *zvolNodes {
	return &zvolNodes{sysBlock: "/sys/block", dev: "/dev", name: zvolDatasetName, found: map[string]string{}}
}

// find looks through every zvol node for the one of dataset. Each node is
// open for the moment of its ioctl, as udev's probes open it: a zvol being
// destroyed at that moment answers "dataset is busy", which DeleteVolume
// retries (controller.zvolBusyRetries).
func (z *zvolNodes) find(dataset string) (string, bool) {
	entries, err := os.ReadDir(z.sysBlock)
	if err != nil {
		return "", false
	}
	for _, entry := range entries {
		if !zvolNodeName.MatchString(entry.Name()) {
			continue
		}
		node := filepath.Join(z.dev, entry.Name())
		if name, err := z.name(node); err == nil && name == dataset {
			z.mu.Lock()
			z.found[dataset] = node
			z.mu.Unlock()
			return node, true
		}
	}
	return "", false
}

// remembered is the node find found for dataset, if it still is that
// dataset's: a zvol destroyed and another made may reuse its minor number.
func (z *zvolNodes) remembered(dataset string) (string, bool) {
	z.mu.Lock()
	node, ok := z.found[dataset]
	z.mu.Unlock()
	if !ok {
		return "", false
	}
	if name, err := z.name(node); err == nil && name == dataset {
		return node, true
	}
	z.forget(dataset)
	return "", false
}

func (z *zvolNodes) forget(dataset string) {
	z.mu.Lock()
	delete(z.found, dataset)
	z.mu.Unlock()
}

// zvolDatasetName asks a zvol's device node for its dataset (BLKZNAME).
// The node must be a block device: anything else in its place is not a zvol.
func zvolDatasetName(node string) (string, error) {
	fd, err := unix.Open(node, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: node, Err: err}
	}
	defer unix.Close(fd)
	var stat unix.Stat_t
	if err := unix.Fstat(fd, &stat); err != nil {
		return "", &os.PathError{Op: "fstat", Path: node, Err: err}
	}
	if stat.Mode&unix.S_IFMT != unix.S_IFBLK {
		return "", fmt.Errorf("%s is not a block device", node)
	}
	var buf [256]byte
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), blkZName, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		return "", &os.PathError{Op: "ioctl BLKZNAME", Path: node, Err: errno}
	}
	name, _, terminated := strings.Cut(string(buf[:]), "\x00")
	if !terminated {
		return "", fmt.Errorf("%s: BLKZNAME answered a name without its end", node)
	}
	return name, nil
}

// zvolOfLink is the dataset whose udev link path is, if path is one.
func zvolOfLink(path string) (string, bool) {
	dataset, ok := strings.CutPrefix(path, ZvolDeviceDir+"/")
	return dataset, ok && dataset != ""
}
