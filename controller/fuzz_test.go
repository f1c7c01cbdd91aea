package controller

import (
	"context"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// FuzzParseCreateParams: any parameter either parses into a volume under an
// allowed parent or is refused with INVALID_ARGUMENT, never a panic, and never
// a driver-owned property.
func FuzzParseCreateParams(f *testing.F) {
	for _, seed := range [][2]string{
		{"parentDataset", "tank/csi"}, {"parentDataset", "tank"}, {"thin", "true"}, {"volblocksize", "16K"},
		{"zfs.compression", "lz4"}, {"zfs.mountpoint", "/"}, {"zfs.zfs.csi.dev:managed", "true"},
		{"zfs.com.example:x", "y"}, {"sourceMode", "copy"}, {"csi.storage.k8s.io/pvc/name", "p"},
	} {
		f.Add(seed[0], seed[1], false)
	}
	cfg := rules.Config{DriverName: "zfs.csi.dev", NodeID: testNode, ParentDatasets: []string{"tank/csi", "tank/other"}}
	props := rules.NewUserProps(cfg.DriverName)
	f.Fuzz(func(t *testing.T, key, value string, zvol bool) {
		params, err := parseCreateParams(cfg, props, map[string]string{key: value}, nil, zvol)
		if err != nil {
			if code(err) != codes.InvalidArgument {
				t.Fatalf("%q=%q: %v", key, value, err)
			}
			return
		}
		if !cfg.IsParent(params.parent) {
			t.Fatalf("%q=%q chose parent %q", key, value, params.parent)
		}
		for property := range params.properties {
			if _, owned := driverOwned[property]; owned || props.Owns(property) {
				t.Fatalf("%q=%q let through driver-owned %q", key, value, property)
			}
		}
	})
}

// FuzzForeignIDs: whatever ID the CO sends, the RPCs that change things
// never change a dataset or snapshot the driver does not own, and lookups
// answer NOT_FOUND or INVALID_ARGUMENT for them.
func FuzzForeignIDs(f *testing.F) {
	for _, seed := range []string{testNode + ":tank/csi/keep", testNode + ":tank/other", testNode + ":tank/csi/keep@s",
		testNode + ":tank/csi", testNode + ":tank", "node-b:tank/csi/keep", "garbage", testNode + ":tank/csi/keep/child"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id string) {
		h := newHarness(t)
		ctx := context.Background()
		for _, name := range []string{"tank/csi/keep/child", "tank/csi/keep@s", "tank/other@s"} {
			var err error
			if name[len(name)-2] == '@' {
				err = h.fake.Snapshot(ctx, name, nil)
			} else {
				err = h.fake.Create(ctx, name, zfs.CreateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		before := h.fake.Names()
		h.server.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
		h.server.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id})
		h.server.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
		h.server.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: map[string]string{"zfs.compression": "off"}})
		h.server.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s2", SourceVolumeId: id})
		h.server.CreateVolume(ctx, fromVolume(createRequest("c", 1<<30, mountCapability("")), id))
		after := h.fake.Names()
		for _, name := range before {
			if !slices.Contains(after, name) {
				t.Fatalf("ID %q destroyed %s", id, name)
			}
		}
		for _, name := range after {
			if !slices.Contains(before, name) && name != "tank/csi/c" {
				t.Fatalf("ID %q made %s", id, name)
			}
		}
		if row := h.datasetProps("tank/csi/keep", "compression"); row.RefQuota != 0 || row.User["compression"] != "" {
			t.Fatalf("ID %q changed tank/csi/keep: %+v", id, row)
		}
		_, err := h.server.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: id})
		if c := code(err); c != codes.NotFound && c != codes.InvalidArgument {
			t.Fatalf("ControllerGetVolume(%q): %v", id, err)
		}
	})
}
