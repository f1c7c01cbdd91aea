package inventory_test

import (
	"strings"
	"testing"

	"github.com/zfs-csi/zfs-csi/inventory"
	"github.com/zfs-csi/zfs-csi/wiring/wiringtest"
)

func diagnose(t *testing.T, f *wiringtest.Fixture) []inventory.Finding {
	t.Helper()
	inv := f.Read()
	mounts, err := f.Host.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	return f.Host.Diagnose(f.Config, inv, mounts)
}

func TestDoctorFindsNothingOnAHealthyHost(t *testing.T) {
	f := wiringtest.New(t)
	dataset := f.CreateVolume("pvc-a", 1<<30, wiringtest.Mount(""), nil)
	block := f.CreateVolume("pvc-b", 1<<30, wiringtest.Block(), nil)
	held := f.CreateVolume("pvc-held", 1<<30, wiringtest.Mount(""), nil)
	f.Snapshot("snap", held)
	f.DeleteVolume(held)
	f.ZvolDevice(wiringtest.Dataset(block), "zd0")
	f.MountDataset(wiringtest.Dataset(dataset), kubeletStaging)
	f.MountDataset(wiringtest.Dataset(dataset), kubeletPublish)
	f.BindDevice("zd0", blockStaging, false)
	if findings := diagnose(t, f); len(findings) != 0 {
		t.Errorf("findings on a healthy host: %+v", findings)
	}
}

func TestDoctorFindsEachKindOfProblem(t *testing.T) {
	tests := []struct {
		name    string
		plant   func(f *wiringtest.Fixture) string // returns the subject the finding names
		kind    string
		problem string // a phrase of the problem
		fix     string // a phrase of the fix
	}{
		{"a deleted volume nothing holds means the reaper is not running", func(f *wiringtest.Fixture) string {
			id := f.CreateVolume("stuck", 1<<30, wiringtest.Mount(""), nil)
			f.Set(wiringtest.Dataset(id), map[string]string{f.Props.Deleted: "true"})
			return wiringtest.Dataset(id)
		}, inventory.FindingDeletedStuck, "the reaper has not run", "zfs destroy -r"},
		{"a deleted volume still mounted must be unmounted before the reaper can destroy it", func(f *wiringtest.Fixture) string {
			id := f.CreateVolume("stuck", 1<<30, wiringtest.Mount(""), nil)
			f.Set(wiringtest.Dataset(id), map[string]string{f.Props.Deleted: "true"})
			f.MountDataset(wiringtest.Dataset(id), "/mnt/debug")
			return wiringtest.Dataset(id)
		}, inventory.FindingDeletedStuck, "still mounted", "umount /mnt/debug"},
		{"a dataset of a deleted volume left mounted under kubelet is a stale mount", func(f *wiringtest.Fixture) string {
			id := f.CreateVolume("gone", 1<<30, wiringtest.Mount(""), nil)
			f.Snapshot("snap", id)
			f.DeleteVolume(id)
			f.MountDataset(wiringtest.Dataset(id), kubeletPublish)
			return kubeletPublish
		}, inventory.FindingStaleMount, "no live volume", "umount " + kubeletPublish},
		{"a dataset mount under kubelet whose dataset no longer exists is a stale mount", func(f *wiringtest.Fixture) string {
			f.MountDataset("tank/csi/pvc-destroyed", kubeletStaging)
			return kubeletStaging
		}, inventory.FindingStaleMount, "no live volume", "umount " + kubeletStaging},
		{"a device node bound under kubelet whose zvol was destroyed is a stale mount", func(f *wiringtest.Fixture) string {
			f.BindDevice("zd32", blockPublish, true)
			return blockPublish
		}, inventory.FindingStaleMount, "its zvol was destroyed", "umount " + blockPublish},
		{"a zvol mounted as a filesystem without the fstype mark is missing a marker", func(f *wiringtest.Fixture) string {
			id := f.CreateVolume("raw", 1<<30, wiringtest.Mount("ext4"), nil)
			f.Set(wiringtest.Dataset(id), map[string]string{f.Props.FSType: ""}) // as `zfs inherit` leaves it
			device := f.ZvolDevice(wiringtest.Dataset(id), "zd0")
			f.MountFilesystem(device, "ext4", kubeletStaging)
			return wiringtest.Dataset(id)
		}, inventory.FindingMissingMarker, "has no zfs.csi.dev:fstype", "zfs set zfs.csi.dev:fstype=ext4"},
		{"a dataset with a CSI name but no managed mark is missing a marker", func(f *wiringtest.Fixture) string {
			id := f.CreateVolume("orphan", 1<<30, wiringtest.Mount(""), nil)
			f.Set(wiringtest.Dataset(id), map[string]string{f.Props.Managed: ""}) // as `zfs inherit` leaves it
			return wiringtest.Dataset(id)
		}, inventory.FindingMissingMarker, "driver ignores it", "zfs set zfs.csi.dev:managed=true"},
		{"a managed volume without a CSI name is missing a marker", func(f *wiringtest.Fixture) string {
			id := f.CreateVolume("nameless", 1<<30, wiringtest.Mount(""), nil)
			f.Set(wiringtest.Dataset(id), map[string]string{f.Props.CSIName: ""}) // as `zfs inherit` leaves it
			return wiringtest.Dataset(id)
		}, inventory.FindingMissingMarker, "has no zfs.csi.dev:csi-name", "zfs set zfs.csi.dev:csi-name=<name>"},
		{"a live zvol without its /dev/zvol link cannot be staged", func(f *wiringtest.Fixture) string {
			id := f.CreateVolume("linkless", 1<<30, wiringtest.Block(), nil)
			return wiringtest.Dataset(id)
		}, inventory.FindingMissingDevLink, "no ", "udevadm trigger"},
		{"an unhealthy pool is reported", func(f *wiringtest.Fixture) string {
			f.Fake.SetPoolHealth("tank", "DEGRADED")
			return "tank"
		}, inventory.FindingParent, "DEGRADED", "zpool status -v tank"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			f := wiringtest.New(t)
			subject := test.plant(f)
			findings := diagnose(t, f)
			for _, finding := range findings {
				if finding.Kind == test.kind && finding.Subject == subject &&
					strings.Contains(finding.Problem, test.problem) && strings.Contains(finding.Fix, test.fix) {
					return
				}
			}
			t.Errorf("no %s finding about %s with %q and fix %q; got %+v", test.kind, subject, test.problem, test.fix, findings)
		})
	}
}
