package inventory_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/zfs-csi/zfs-csi/inventory"
	"github.com/zfs-csi/zfs-csi/wiring/wiringtest"
	"github.com/zfs-csi/zfs-csi/zfs"
)

const (
	kubeletStaging = "/var/lib/kubelet/plugins/kubernetes.io/csi/zfs.csi.dev/0123abcd/globalmount"
	kubeletPublish = "/var/lib/kubelet/pods/pod-1/volumes/kubernetes.io~csi/pv-a/mount"
	blockStaging   = "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pv-b/zvol"
	blockPublish   = "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-b/pod-2"
)

func volumeByName(t *testing.T, inv inventory.Inventory, csiName string) inventory.Volume {
	t.Helper()
	for _, volume := range inv.Volumes {
		if volume.CSIName == csiName {
			return volume
		}
	}
	t.Fatalf("volume %q is not listed; volumes: %+v", csiName, inv.Volumes)
	return inventory.Volume{}
}

func TestReadListsTheDriversVolumesWithTheirFields(t *testing.T) {
	f := wiringtest.New(t)
	datasetID := f.CreateVolume("pvc-a", 1<<30, wiringtest.Mount(""), map[string]string{
		"csi.storage.k8s.io/pvc/namespace": "shop", "csi.storage.k8s.io/pvc/name": "data"})
	zvolID := f.CreateVolume("pvc-b", 2<<30, wiringtest.Mount("ext4"), map[string]string{"thin": "true"})
	if err := f.Fake.Write(wiringtest.Dataset(datasetID), 5<<20); err != nil {
		t.Fatal(err)
	}
	inv := f.Read()

	tests := []struct {
		name string
		got  inventory.Volume
		want inventory.Volume
	}{
		{"a dataset volume has its refquota as size, its PVC and state ok", volumeByName(t, inv, "pvc-a"), inventory.Volume{
			ID: datasetID, Dataset: wiringtest.Dataset(datasetID), CSIName: "pvc-a", Kind: "dataset", FSType: "zfs",
			State: inventory.StateOK, Capacity: 1 << 30, Referenced: 5 << 20, LogicalUsed: 5 << 20, CompressRatio: 1,
			PVCNamespace: "shop", PVCName: "data"}},
		{"a thin zvol formatted ext4 has its volsize as size and its filesystem", volumeByName(t, inv, "pvc-b"), inventory.Volume{
			ID: zvolID, Dataset: wiringtest.Dataset(zvolID), CSIName: "pvc-b", Kind: "zvol", FSType: "ext4",
			State: inventory.StateOK, Capacity: 2 << 30, CompressRatio: 1, Thin: true}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			got := test.got
			// Fields that depend on the fake's accounting and clock are checked elsewhere.
			got.Used, got.Created, got.Staged, got.Published = 0, test.want.Created, nil, nil
			if !reflect.DeepEqual(got, test.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, test.want)
			}
		})
	}
}

func TestReadTellsVolumeStatesApart(t *testing.T) {
	f := wiringtest.New(t)
	live := f.CreateVolume("live", 1<<30, wiringtest.Mount(""), nil)
	held := f.CreateVolume("held", 1<<30, wiringtest.Mount(""), nil)
	f.Snapshot("snap-of-held", held)
	f.DeleteVolume(held)
	stuck := f.CreateVolume("stuck", 1<<30, wiringtest.Mount(""), nil)
	f.Set(wiringtest.Dataset(stuck), map[string]string{f.Props.Deleted: "true"})
	unmarked := f.CreateVolume("unmarked", 1<<30, wiringtest.Mount(""), nil)
	f.Set(wiringtest.Dataset(unmarked), map[string]string{f.Props.Managed: "false"})
	if err := f.Fake.Create(t.Context(), "tank/csi/operators-own", zfs.CreateOptions{}); err != nil {
		t.Fatal(err) // an operator's own dataset: neither a volume nor unmarked
	}
	inv := f.Read()

	tests := []struct {
		name, csiName, want string
	}{
		{"a volume nobody deleted is ok", "live", inventory.StateOK},
		{"a deleted volume whose snapshot remains is deleted-held", "held", inventory.StateDeletedHeld},
		{"a deleted volume nothing holds is deleted-stuck", "stuck", inventory.StateDeletedStuck},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if got := volumeByName(t, inv, test.csiName).State; got != test.want {
				t.Errorf("state = %q, want %q", got, test.want)
			}
		})
	}
	t.Run("a dataset with a CSI name but without the managed mark is unmarked, not a volume", func(t *testing.T) {
		if len(inv.Volumes) != 3 || len(inv.Unmarked) != 1 || inv.Unmarked[0].ID != unmarked {
			t.Errorf("volumes %d (want 3), unmarked %+v", len(inv.Volumes), inv.Unmarked)
		}
	})
	t.Run("the reaper backlog counts the deleted volumes still there", func(t *testing.T) {
		if got := inv.ReaperBacklog(); got != 2 {
			t.Errorf("backlog = %d, want 2", got)
		}
		if got := inv.Live(); len(got) != 1 || got[0].ID != live {
			t.Errorf("live = %+v", got)
		}
	})
	t.Run("the parent counts its volumes and the pool is reported", func(t *testing.T) {
		if len(inv.Parents) != 1 || !inv.Parents[0].Exists || inv.Parents[0].Volumes != 3 {
			t.Errorf("parents = %+v", inv.Parents)
		}
		if len(inv.Pools) != 1 || inv.Pools[0].Name != "tank" || inv.Pools[0].Health != "ONLINE" {
			t.Errorf("pools = %+v", inv.Pools)
		}
	})
}

func TestReadListsSnapshotsWithTheirStates(t *testing.T) {
	f := wiringtest.New(t)
	volume := f.CreateVolume("vol", 1<<30, wiringtest.Mount(""), nil)
	kept := f.Snapshot("kept", volume)
	cloned := f.Snapshot("cloned", volume)
	f.CloneVolume("clone", cloned, wiringtest.Mount(""))
	f.DeleteSnapshot(cloned)
	inv := f.Read()

	states := map[string]string{}
	for _, snapshot := range inv.Snapshots {
		states[snapshot.ID] = snapshot.State
		if snapshot.SourceVolumeID != volume {
			t.Errorf("snapshot %s: source %q, want %q", snapshot.ID, snapshot.SourceVolumeID, volume)
		}
	}
	want := map[string]string{kept: inventory.SnapshotOK, cloned: inventory.SnapshotDeletedHeld}
	if !reflect.DeepEqual(states, want) {
		t.Errorf("snapshot states %v, want %v", states, want)
	}
	if got := volumeByName(t, inv, "vol"); got.Snapshots != 1 || len(got.Dependents) != 1 {
		t.Errorf("volume counts %d snapshots and dependents %v; want 1 and the clone", got.Snapshots, got.Dependents)
	}
}

func TestPlaceFindsWhereVolumesAreStagedAndPublished(t *testing.T) {
	f := wiringtest.New(t)
	dataset := f.CreateVolume("pvc-a", 1<<30, wiringtest.Mount(""), nil)
	block := f.CreateVolume("pvc-b", 1<<30, wiringtest.Block(), nil)
	formatted := f.CreateVolume("pvc-c", 1<<30, wiringtest.Mount("xfs"), nil)
	debugging := f.CreateVolume("pvc-d", 1<<30, wiringtest.Mount(""), nil)
	f.ZvolDevice(wiringtest.Dataset(block), "zd0")
	xfsDevice := f.ZvolDevice(wiringtest.Dataset(formatted), "zd16")
	f.MountDataset(wiringtest.Dataset(dataset), kubeletStaging)
	f.MountDataset(wiringtest.Dataset(dataset), kubeletPublish)
	f.BindDevice("zd0", blockStaging, false)
	f.BindDevice("zd0", blockPublish, false)
	f.MountFilesystem(xfsDevice, "xfs", "/opt/nomad/data/client/csi/node/zfs/staging/default/pvc-c/rw-file-system-single-node-writer")
	f.MountDataset(wiringtest.Dataset(debugging), "/tmp/stage")
	f.MountDataset(wiringtest.Dataset(debugging), "/tmp/publish")
	inv := f.Read()

	tests := []struct {
		name              string
		csiName           string
		staged, published []string
	}{
		{"a dataset staged and published by kubelet", "pvc-a", []string{kubeletStaging}, []string{kubeletPublish}},
		{"a raw block zvol whose device node is bound by kubelet", "pvc-b", []string{blockStaging}, []string{blockPublish}},
		{"a formatted zvol staged by Nomad and not yet published", "pvc-c",
			[]string{"/opt/nomad/data/client/csi/node/zfs/staging/default/pvc-c/rw-file-system-single-node-writer"}, []string{}},
		{"outside the CO's layouts the first mount is taken for the staging one", "pvc-d", []string{"/tmp/stage"}, []string{"/tmp/publish"}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			volume := volumeByName(t, inv, test.csiName)
			if !reflect.DeepEqual(volume.Staged, test.staged) || !reflect.DeepEqual(volume.Published, test.published) {
				t.Errorf("staged %q published %q; want %q and %q", volume.Staged, volume.Published, test.staged, test.published)
			}
		})
	}
	if volume := volumeByName(t, inv, "pvc-c"); volume.Device != xfsDevice {
		t.Errorf("device = %q, want %q", volume.Device, xfsDevice)
	}
}

// listRecorder records the options of every zfs list.
type listRecorder struct {
	zfs.Interface
	lists []zfs.ListOptions
}

func (r *listRecorder) List(ctx context.Context, opts zfs.ListOptions) ([]zfs.Dataset, error) {
	r.lists = append(r.lists, opts)
	return r.Interface.List(ctx, opts)
}

// ReadVolumes (the metrics' read) gives what Read gives about live volumes
// and the reaper backlog, without a listing that visits every snapshot.
func TestReadVolumesSkipsSnapshotsAndKeepsWhatTheMetricsShow(t *testing.T) {
	f := wiringtest.New(t)
	f.CreateVolume("live", 1<<30, wiringtest.Mount(""), nil)
	held := f.CreateVolume("held", 1<<30, wiringtest.Mount(""), nil)
	f.Snapshot("snap-of-held", held)
	f.DeleteVolume(held)
	full := f.Read()
	recorder := &listRecorder{Interface: f.Fake}
	inv, err := inventory.ReadVolumes(t.Context(), recorder, f.Config)
	if err != nil {
		t.Fatal(err)
	}
	if len(recorder.lists) != 1 || slices.Contains(recorder.lists[0].Types, zfs.Snapshot) || recorder.lists[0].Depth != 1 {
		t.Errorf("zfs lists %+v, want one of filesystems and volumes at depth 1", recorder.lists)
	}
	if !reflect.DeepEqual(inv.Live(), full.Live()) || inv.ReaperBacklog() != 1 || full.ReaperBacklog() != 1 {
		t.Errorf("live %+v, backlog %d; Read gives live %+v, backlog %d", inv.Live(), inv.ReaperBacklog(), full.Live(), full.ReaperBacklog())
	}
	if got := volumeByName(t, inv, "held").State; got != inventory.StateDeleted {
		t.Errorf("a deleted volume read without its snapshots is %q, want %q", got, inventory.StateDeleted)
	}
	if !reflect.DeepEqual(inv.Pools, full.Pools) || len(inv.Snapshots) != 0 {
		t.Errorf("pools %+v (Read: %+v), snapshots %+v", inv.Pools, full.Pools, inv.Snapshots)
	}
}
