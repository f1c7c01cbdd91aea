package controller

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// operatorData makes data an operator has: a filesystem with 3 MiB and a
// mountpoint of its own, outside the driver's parents unless under says.
func operatorData(t *testing.T, h *harness, name string, opts zfs.CreateOptions) {
	t.Helper()
	if err := h.fake.Create(context.Background(), name, opts); err != nil {
		t.Fatal(err)
	}
	if err := h.fake.Write(name, 3<<20); err != nil {
		t.Fatal(err)
	}
}

func TestAnAdoptedDatasetIsServedAndRetainModeNeverDestroysIt(t *testing.T) {
	h := newHarness(t)
	operatorData(t, h, "tank/db", zfs.CreateOptions{Properties: map[string]string{"refquota": "1073741824", "mountpoint": "/srv/db"}})
	ctx := context.Background()
	volume, err := h.server.Adopt(ctx, AdoptRequest{Dataset: "tank/db", Name: "db", Retain: true, Rename: true})
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	dataset := strings.TrimPrefix(volume.GetVolumeId(), testNode+":")
	if dataset != "tank/csi/db" || volume.GetCapacityBytes() != 1<<30 || volume.GetVolumeContext()[rules.ContextKind] != rules.KindDataset {
		t.Errorf("adopted as %+v", volume)
	}
	if got := h.fake.Property(dataset, "mountpoint"); got != "legacy" {
		t.Errorf("mountpoint %q, want legacy (the node mounts it)", got)
	}
	if again, err := h.server.Adopt(ctx, AdoptRequest{Dataset: "tank/db", Name: "db", Retain: true, Rename: true}); err != nil || again.GetVolumeId() != volume.GetVolumeId() {
		t.Errorf("a retry of the adoption: %v (%v), want the same volume", again, err)
	}
	if ids := h.listVolumeIDs(); !slices.Contains(ids, volume.GetVolumeId()) {
		t.Errorf("ListVolumes %v misses the adopted volume", ids)
	}
	for what, call := range map[string]func() error{
		"a snapshot": func() error {
			_, err := h.server.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: volume.GetVolumeId()})
			return err
		},
		"a clone": func() error {
			req := createRequest("clone", 1<<30, mountCapability(""))
			req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
				Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: volume.GetVolumeId()}}}
			_, err := h.server.CreateVolume(ctx, req)
			return err
		},
		"an expansion": func() error {
			_, err := h.server.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: volume.GetVolumeId(),
				CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}})
			return err
		},
	} {
		if err := call(); code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "retain mode") {
			t.Errorf("%s of a retained volume: %v, want FAILED_PRECONDITION saying why", what, err)
		}
	}
	if _, err := h.server.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volume.GetVolumeId()}); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	row := h.dataset(dataset)
	if row.Referenced != 3<<20 || row.User[h.props.Managed] != "" || row.User[h.props.CSIName] != "" {
		t.Errorf("after DeleteVolume: %+v, want the data with no mark of the driver", row)
	}
	if got := h.fake.Property(dataset, "mountpoint"); got != "/srv/db" {
		t.Errorf("mountpoint %q after the driver forgot it, want the operator's /srv/db", got)
	}
}

func TestAnAdoptedZvolInOwnModeIsAVolumeLikeAnyOther(t *testing.T) {
	h := newHarness(t)
	operatorData(t, h, "tank/csi/vm", zfs.CreateOptions{VolSize: 64 << 20})
	h.server.UseHost(nil, func(context.Context, string) (string, error) { return "ext4", nil })
	ctx := context.Background()
	volume, err := h.server.Adopt(ctx, AdoptRequest{Dataset: "tank/csi/vm", Name: "vm", FSType: "ext4"})
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if volume.GetVolumeContext()[rules.ContextFSType] != "ext4" || volume.GetCapacityBytes() != 64<<20 {
		t.Errorf("adopted as %+v", volume)
	}
	h.snapshot("vm-snap", volume.GetVolumeId())
	if _, err := h.server.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: volume.GetVolumeId(),
		CapacityRange: &csi.CapacityRange{RequiredBytes: 128 << 20}}); err != nil {
		t.Errorf("expanding an owned adopted volume: %v", err)
	}
	if h.fake.Property("tank/csi/vm", h.props.Source) == "" {
		t.Error("an adopted zvol is not marked as made from a source: staging could format a blank-looking one")
	}
}

func TestAnAdoptionIsRefusedWithNothingChanged(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, h *harness)
		req   AdoptRequest
		want  codes.Code
	}{
		{"a dataset outside every parent without rename", func(t *testing.T, h *harness) {
			operatorData(t, h, "tank/db", zfs.CreateOptions{Properties: map[string]string{"refquota": "1073741824"}})
		}, AdoptRequest{Dataset: "tank/db", Name: "db", Retain: true}, codes.FailedPrecondition},
		{"a filesystem without a finite size", func(t *testing.T, h *harness) {
			operatorData(t, h, "tank/csi/db", zfs.CreateOptions{})
		}, AdoptRequest{Dataset: "tank/csi/db", Name: "db", Retain: true}, codes.FailedPrecondition},
		{"a size below what it holds", func(t *testing.T, h *harness) {
			operatorData(t, h, "tank/csi/db", zfs.CreateOptions{})
		}, AdoptRequest{Dataset: "tank/csi/db", Name: "db", Retain: true, Size: 1 << 20}, codes.OutOfRange},
		{"a dataset with a child", func(t *testing.T, h *harness) {
			operatorData(t, h, "tank/csi/db", zfs.CreateOptions{Properties: map[string]string{"refquota": "1073741824"}})
			operatorData(t, h, "tank/csi/db/logs", zfs.CreateOptions{})
		}, AdoptRequest{Dataset: "tank/csi/db", Name: "db", Retain: true}, codes.FailedPrecondition},
		{"a snapshot with a clone", func(t *testing.T, h *harness) {
			operatorData(t, h, "tank/csi/db", zfs.CreateOptions{Properties: map[string]string{"refquota": "1073741824"}})
			mustDo(t, h.fake.Snapshot(context.Background(), "tank/csi/db@s", nil))
			mustDo(t, h.fake.Clone(context.Background(), "tank/csi/db@s", "tank/db-copy", nil))
		}, AdoptRequest{Dataset: "tank/csi/db", Name: "db", Retain: true}, codes.FailedPrecondition},
		{"a mounted dataset", func(t *testing.T, h *harness) {
			operatorData(t, h, "tank/csi/db", zfs.CreateOptions{Properties: map[string]string{"refquota": "1073741824"}})
			h.server.UseHost(func(string, ...string) (bool, error) { return true, nil }, nil)
		}, AdoptRequest{Dataset: "tank/csi/db", Name: "db", Retain: true}, codes.FailedPrecondition},
		{"a zvol holding another filesystem", func(t *testing.T, h *harness) {
			operatorData(t, h, "tank/csi/vm", zfs.CreateOptions{VolSize: 64 << 20})
			h.server.UseHost(nil, func(context.Context, string) (string, error) { return "xfs", nil })
		}, AdoptRequest{Dataset: "tank/csi/vm", Name: "vm", FSType: "ext4"}, codes.FailedPrecondition},
		{"a blank zvol asked for as ext4 (never formatted over)", func(t *testing.T, h *harness) {
			operatorData(t, h, "tank/csi/vm", zfs.CreateOptions{VolSize: 64 << 20})
			h.server.UseHost(nil, func(context.Context, string) (string, error) { return "", nil })
		}, AdoptRequest{Dataset: "tank/csi/vm", Name: "vm", FSType: "ext4"}, codes.FailedPrecondition},
		{"a name a volume already has", func(t *testing.T, h *harness) {
			h.create(createRequest("db", 1<<30, mountCapability("")))
			operatorData(t, h, "tank/db", zfs.CreateOptions{Properties: map[string]string{"refquota": "1073741824"}})
		}, AdoptRequest{Dataset: "tank/db", Name: "db", Retain: true, Rename: true}, codes.AlreadyExists},
		{"a volume the driver made", func(t *testing.T, h *harness) {
			h.create(createRequest("made", 1<<30, mountCapability("")))
		}, AdoptRequest{Dataset: "tank/csi/made", Name: "other", Rename: true}, codes.AlreadyExists},
		{"a dataset that does not exist", func(*testing.T, *harness) {}, AdoptRequest{Dataset: "tank/csi/none", Name: "none"}, codes.NotFound},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			h := newHarness(t)
			test.setup(t, h)
			before := snapshotOfState(h)
			_, err := h.server.Adopt(context.Background(), test.req)
			if code(err) != test.want {
				t.Errorf("Adopt: %v, want %s", err, test.want)
			}
			if after := snapshotOfState(h); after != before {
				t.Errorf("a refused adoption changed ZFS:\n%s\n→\n%s", before, after)
			}
		})
	}
}

// snapshotOfState renders every dataset with its driver marks and
// mountpoint: what an adoption could change.
func snapshotOfState(h *harness) string {
	var b strings.Builder
	for _, name := range h.fake.Names() {
		b.WriteString(name + " " + h.fake.Property(name, h.props.Managed) + " " + h.fake.Property(name, "mountpoint") + " " +
			h.fake.Property(name, "refquota") + "\n")
	}
	return b.String()
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestReleaseGivesDataBackAndIsRefusedWhileInUse(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("made", 1<<30, mountCapability("")))
	dataset := strings.TrimPrefix(volume.GetVolumeId(), testNode+":")
	mustDo(t, h.fake.Write(dataset, 1<<20))
	ctx := context.Background()
	used := true
	h.server.UseHost(func(string, ...string) (bool, error) { return used, nil }, nil)
	if _, err := h.server.Release(ctx, volume.GetVolumeId()); code(err) != codes.FailedPrecondition {
		t.Errorf("Release while staged: %v, want FAILED_PRECONDITION", err)
	}
	used = false
	if _, err := h.server.Release(ctx, volume.GetVolumeId()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	row := h.dataset(dataset)
	for _, property := range h.props.All() {
		if value := h.fake.Property(dataset, property); value != "" {
			t.Errorf("%s=%s stays after release", property, value)
		}
	}
	if row.Referenced != 1<<20 || row.RefQuota != 1<<30 {
		t.Errorf("after release: %+v, want its data and its refquota", row)
	}
	if _, err := h.server.Release(ctx, volume.GetVolumeId()); code(err) != codes.NotFound {
		t.Errorf("releasing it again: %v, want NOT_FOUND (no longer the driver's)", err)
	}
}

// A release killed at any point (after its mountpoint came back, or with
// only some of its marks gone) leaves a volume that one more Release
// finishes; no mark of the driver outlives the managed mark.
func TestAReleaseInterruptedAnywhereIsFinishedByTheNext(t *testing.T) {
	for cut := 0; cut <= 5; cut++ {
		h := newHarness(t)
		operatorData(t, h, "tank/csi/db", zfs.CreateOptions{Properties: map[string]string{"refquota": "1073741824", "mountpoint": "/srv/db"}})
		ctx := context.Background()
		volume, err := h.server.Adopt(ctx, AdoptRequest{Dataset: "tank/csi/db", Name: "db"})
		if err != nil {
			t.Fatalf("Adopt: %v", err)
		}
		// ZFS mounts the filesystem where its mountpoint comes back; only a
		// mount elsewhere is a use.
		h.server.UseHost(func(dataset string, except ...string) (bool, error) {
			return h.fake.Property(dataset, "mountpoint") == "/srv/db" && !slices.Contains(except, "/srv/db"), nil
		}, nil)
		h.fake.InterruptInherit(cut)
		_, err = h.server.Release(ctx, volume.GetVolumeId())
		marks := 0
		for _, property := range h.props.All() {
			if h.fake.Property("tank/csi/db", property) != "" {
				marks++
			}
		}
		switch {
		case err == nil:
			if marks != 0 {
				t.Errorf("cut after %d: released with %d marks left", cut, marks)
			}
			continue
		case h.fake.Property("tank/csi/db", h.props.Managed) == "" && marks > 0:
			t.Fatalf("cut after %d: the managed mark went before %d others", cut, marks)
		}
		if _, err := h.server.Release(ctx, volume.GetVolumeId()); err != nil {
			t.Fatalf("cut after %d: releasing again: %v", cut, err)
		}
		for _, property := range h.props.All() {
			if value := h.fake.Property("tank/csi/db", property); value != "" {
				t.Errorf("cut after %d: %s=%s stays", cut, property, value)
			}
		}
		if got := h.fake.Property("tank/csi/db", "mountpoint"); got != "/srv/db" {
			t.Errorf("cut after %d: mountpoint %q, want /srv/db back", cut, got)
		}
	}
}
