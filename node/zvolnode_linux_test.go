package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// fakeZvolNodes is /sys/block and the zvol nodes' BLKZNAME answers: node →
// dataset, as the kernel keeps them (e2e/tests TestNodeStagesAZvolBeforeUdevLinksIt
// asks the real ones).
type fakeZvolNodes struct {
	mu    sync.Mutex
	names map[string]string
	asked []string
}

func (f *fakeZvolNodes) name(node string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, node)
	name, ok := f.names[node]
	if !ok {
		return "", os.ErrNotExist
	}
	return name, nil
}

func (f *fakeZvolNodes) set(node, dataset string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.names[node] = dataset
}

func (f *fakeZvolNodes) questions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

// linklessHost is a host mounter whose /sys/block lists the given entries
// and whose zvol nodes answer from the fake; no /dev/zvol link exists.
func linklessHost(t *testing.T, grace time.Duration, entries ...string) (*hostMounter, *fakeZvolNodes) {
	t.Helper()
	sys := t.TempDir()
	for _, entry := range entries {
		if err := os.Mkdir(filepath.Join(sys, entry), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fake := &fakeZvolNodes{names: map[string]string{}}
	zvols := newZvolNodes()
	zvols.sysBlock, zvols.dev, zvols.name = sys, "/dev", fake.name
	return &hostMounter{log: zerolog.Nop(), pollInterval: time.Millisecond, linkGrace: grace, zvols: zvols}, fake
}

// A dataset name no host has a /dev/zvol link for.
const linklessDataset = "zfs-csi-test-pool-that-is-not-here/csi/v"

func TestAZvolWithoutItsLinkIsFoundByAskingTheZvolNodesAfterTheGrace(t *testing.T) {
	host, fake := linklessHost(t, 20*time.Millisecond, "loop0", "sda", "zd0", "zd16", "zd32")
	fake.set("/dev/zd0", "tank/other")
	fake.set("/dev/zd16", linklessDataset)
	fake.set("/dev/zd32", linklessDataset+"-not")
	started := time.Now()
	device, err := host.WaitForDevice(context.Background(), ZvolDeviceDir+"/"+linklessDataset)
	if err != nil || device != "/dev/zd16" {
		t.Fatalf("WaitForDevice = %q, %v; want /dev/zd16", device, err)
	}
	if waited := time.Since(started); waited < 20*time.Millisecond {
		t.Errorf("the nodes were asked after %v, before the grace for udev's link (20ms)", waited)
	}
	for _, asked := range fake.questions() {
		if asked == "/dev/loop0" || asked == "/dev/sda" {
			t.Errorf("asked %s, which is not a zvol node, for its dataset", asked)
		}
	}

	// Until udev links it, the node found stands for the link.
	if device, err := host.ResolveDevice(ZvolDeviceDir + "/" + linklessDataset); err != nil || device != "/dev/zd16" {
		t.Errorf("ResolveDevice after the wait = %q, %v; want /dev/zd16", device, err)
	}
	// The zvol destroyed and its minor reused by another: the node is no
	// longer this volume's.
	fake.set("/dev/zd16", "tank/newcomer")
	if device, err := host.ResolveDevice(ZvolDeviceDir + "/" + linklessDataset); !errors.Is(err, ErrNoDevice) {
		t.Errorf("ResolveDevice of a node that names another zvol now = %q, %v; want ErrNoDevice", device, err)
	}
	fake.set("/dev/zd16", linklessDataset)
	if device, err := host.ResolveDevice(ZvolDeviceDir + "/" + linklessDataset); !errors.Is(err, ErrNoDevice) {
		t.Errorf("ResolveDevice after the node was forgotten = %q, %v; want ErrNoDevice until the next wait", device, err)
	}
}

func TestTheZvolNodesAreNotAskedWithinTheGraceNorForOtherLinks(t *testing.T) {
	host, fake := linklessHost(t, time.Hour, "zd0")
	fake.set("/dev/zd0", linklessDataset)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if device, err := host.WaitForDevice(ctx, ZvolDeviceDir+"/"+linklessDataset); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitForDevice within the grace = %q, %v; want the deadline", device, err)
	}

	host, fake = linklessHost(t, time.Millisecond, "zd0")
	fake.set("/dev/zd0", linklessDataset)
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if device, err := host.WaitForDevice(ctx, "/dev/disk/by-id/"+linklessDataset); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitForDevice of a link outside %s = %q, %v; want the deadline", ZvolDeviceDir, device, err)
	}
	if device, err := host.ResolveDevice(ZvolDeviceDir + "/" + linklessDataset); !errors.Is(err, ErrNoDevice) {
		t.Errorf("ResolveDevice before any wait found = %q, %v; want ErrNoDevice (only a wait asks every node)", device, err)
	}
	if asked := fake.questions(); len(asked) != 0 {
		t.Errorf("the zvol nodes were asked %v", asked)
	}
}

func TestBLKZNAMEIsNotAskedOfWhatIsNotABlockDevice(t *testing.T) {
	file := filepath.Join(t.TempDir(), "zd0")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if name, err := zvolDatasetName(file); err == nil {
		t.Errorf("a regular file answered %q", name)
	}
	if name, err := zvolDatasetName("/dev/null"); err == nil {
		t.Errorf("/dev/null (a character device) answered %q", name)
	}
}
