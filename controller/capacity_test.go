package controller

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/zfs"
)

func TestGetCapacity(t *testing.T) {
	multiNode := mountCapability("")
	multiNode.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	tests := []struct {
		name string
		req  *csi.GetCapacityRequest
		want int64 // -1: the pool's free space
	}{
		{"with no filter it is the parent's available space", &csi.GetCapacityRequest{}, -1},
		{"for a dataset it is the available space, all of it usable", &csi.GetCapacityRequest{
			VolumeCapabilities: []*csi.VolumeCapability{mountCapability("")}}, -1},
		{"for this node's topology it is the available space", &csi.GetCapacityRequest{
			AccessibleTopology: &csi.Topology{Segments: map[string]string{"zfs.csi.dev/node": testNode}}}, -1},
		{"for another node's topology it is zero", &csi.GetCapacityRequest{
			AccessibleTopology: &csi.Topology{Segments: map[string]string{"zfs.csi.dev/node": "node-b"}}}, 0},
		{"for a multi-node capability it is zero", &csi.GetCapacityRequest{VolumeCapabilities: []*csi.VolumeCapability{multiNode}}, 0},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			h := newHarness(t)
			h.create(createRequest("v", 1<<30, mountCapability(""))) // thick: takes 1 GiB
			h.fake.ResetCalls()
			response, err := h.server.GetCapacity(context.Background(), test.req)
			if err != nil {
				t.Fatal(err)
			}
			want := test.want
			if want < 0 {
				want = 1<<40 - 1<<30
				if calls := h.fake.TotalCalls(); calls != 1 {
					t.Errorf("ran %d commands, want 1", calls)
				}
			}
			if response.GetAvailableCapacity() != want {
				t.Errorf("available %d, want %d", response.GetAvailableCapacity(), want)
			}
			wantMax := want
			if len(test.req.GetVolumeCapabilities()) == 0 {
				// The kind is open: a thick zvol's reservation counts.
				wantMax = int64(largestThickZvol(uint64(want), 0))
			}
			if want > 0 && (response.GetMaximumVolumeSize().GetValue() != wantMax || response.GetMinimumVolumeSize().GetValue() != int64(MinVolumeSize)) {
				t.Errorf("max %v min %v", response.GetMaximumVolumeSize(), response.GetMinimumVolumeSize())
			}
		})
	}
	t.Run("a parent dataset that is not allowed is invalid", func(t *testing.T) {
		h := newHarness(t)
		_, err := h.server.GetCapacity(context.Background(), &csi.GetCapacityRequest{Parameters: map[string]string{ParamParentDataset: "tank"}})
		if code(err) != codes.InvalidArgument {
			t.Errorf("got %v", err)
		}
	})
}

func TestValidateVolumeCapabilities(t *testing.T) {
	h := newHarness(t)
	dataset := h.create(createRequest("d", 1<<30, mountCapability(""))).GetVolumeId()
	ext4 := h.create(createRequest("e", 1<<30, mountCapability("ext4"))).GetVolumeId()
	raw := h.create(createRequest("b", 1<<30, blockCapability())).GetVolumeId()
	multiNode := mountCapability("")
	multiNode.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	tests := []struct {
		name       string
		volumeID   string
		capability *csi.VolumeCapability
		confirmed  bool
	}{
		{"a dataset serves zfs mounts", dataset, mountCapability("zfs"), true},
		{"a dataset does not serve block access", dataset, blockCapability(), false},
		{"a dataset does not serve ext4 mounts", dataset, mountCapability("ext4"), false},
		{"an ext4 zvol serves ext4 mounts", ext4, mountCapability("ext4"), true},
		// NodeStage and NodePublish refuse raw access to a formatted zvol, so
		// it is not confirmed either (rules.KindServes, one rule).
		{"an ext4 zvol does not serve block access", ext4, blockCapability(), false},
		{"a raw zvol serves block access", raw, blockCapability(), true},
		{"a raw zvol does not serve ext4 mounts", raw, mountCapability("ext4"), false},
		{"an ext4 zvol does not serve xfs mounts", ext4, mountCapability("xfs"), false},
		{"no volume serves multi-node access", dataset, multiNode, false},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			response, err := h.server.ValidateVolumeCapabilities(context.Background(), &csi.ValidateVolumeCapabilitiesRequest{
				VolumeId: test.volumeID, VolumeCapabilities: []*csi.VolumeCapability{test.capability}})
			if err != nil {
				t.Fatal(err)
			}
			if (response.GetConfirmed() != nil) != test.confirmed || (!test.confirmed && response.GetMessage() == "") {
				t.Errorf("confirmed=%v message=%q", response.GetConfirmed() != nil, response.GetMessage())
			}
		})
	}
	t.Run("an unknown volume is not found", func(t *testing.T) {
		_, err := h.server.ValidateVolumeCapabilities(context.Background(), &csi.ValidateVolumeCapabilitiesRequest{
			VolumeId: testNode + ":tank/csi/keep", VolumeCapabilities: []*csi.VolumeCapability{mountCapability("")}})
		if code(err) != codes.NotFound {
			t.Errorf("got %v", err)
		}
	})
}

func TestExpandAndModify(t *testing.T) {
	tests := []struct {
		name          string
		capability    *csi.VolumeCapability
		parameters    map[string]string
		grow          int64
		wantSize      int64
		wantNode      bool
		wantQuota     uint64 // dataset refquota or zvol volsize after
		wantReserved  uint64
		wantSetsTotal int
	}{
		{"a thick dataset grows its refquota and reservation", mountCapability(""), nil, 2 << 30, 2 << 30, false, 2 << 30, 2 << 30, 2},
		{"a thin dataset grows its refquota only", mountCapability(""), map[string]string{ParamThin: "true"}, 2 << 30, 2 << 30, false, 2 << 30, 0, 2},
		{"a raw zvol grows without the node", blockCapability(), nil, 2<<30 + 1, 2<<30 + 16<<10, false, 2<<30 + 16<<10,
			zfs.ThickReservation(2<<30+16<<10, 16<<10), 2},
		{"a formatted zvol needs the node to grow its filesystem", mountCapability("xfs"), nil, 2 << 30, 2 << 30, true, 2 << 30,
			zfs.ThickReservation(2<<30, 16<<10), 2},
		{"a smaller request keeps the current size", mountCapability(""), nil, 1 << 20, 1 << 30, false, 1 << 30, 1 << 30, 1},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			h := newHarness(t)
			req := createRequest("v", 1<<30, test.capability)
			req.Parameters = test.parameters
			volume := h.create(req)
			h.fake.ResetCalls()
			response, err := h.server.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
				VolumeId: volume.GetVolumeId(), CapacityRange: &csi.CapacityRange{RequiredBytes: test.grow}})
			if err != nil {
				t.Fatal(err)
			}
			if calls := h.fake.TotalCalls(); calls != test.wantSetsTotal {
				t.Errorf("ran %d commands, want %d", calls, test.wantSetsTotal)
			}
			if response.GetCapacityBytes() != test.wantSize || response.GetNodeExpansionRequired() != test.wantNode {
				t.Errorf("response %v", response)
			}
			row := h.dataset(datasetOf(t, volume.GetVolumeId()))
			if capacity(row) != test.wantQuota || row.RefReservation != test.wantReserved {
				t.Errorf("size %d reservation %d", capacity(row), row.RefReservation)
			}
		})
	}
	t.Run("a limit below the current size is out of range", func(t *testing.T) {
		h := newHarness(t)
		volume := h.create(createRequest("v", 1<<30, mountCapability("")))
		_, err := h.server.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
			VolumeId: volume.GetVolumeId(), CapacityRange: &csi.CapacityRange{LimitBytes: 1 << 20}})
		if code(err) != codes.OutOfRange {
			t.Errorf("got %v", err)
		}
	})
	t.Run("modify sets mutable properties and refuses the rest", func(t *testing.T) {
		h := newHarness(t)
		volume := h.create(createRequest("v", 1<<30, mountCapability("")))
		modify := func(parameters map[string]string) error {
			_, err := h.server.ControllerModifyVolume(context.Background(), &csi.ControllerModifyVolumeRequest{
				VolumeId: volume.GetVolumeId(), MutableParameters: parameters})
			return err
		}
		if err := modify(map[string]string{"zfs.compression": "zstd", "zfs.com.example:tier": "gold"}); err != nil {
			t.Fatal(err)
		}
		row := h.datasetProps(datasetOf(t, volume.GetVolumeId()), "compression", "com.example:tier")
		if row.User["compression"] != "zstd" || row.User["com.example:tier"] != "gold" {
			t.Errorf("properties %v", row.User)
		}
		for _, refused := range []map[string]string{{"zfs.refquota": "1"}, {"zfs.casesensitivity": "mixed"}, {"zfs.volmode": "dev"}, {}} {
			if err := modify(refused); code(err) != codes.InvalidArgument {
				t.Errorf("%v: got %v", refused, err)
			}
		}
		_, err := h.server.ControllerModifyVolume(context.Background(), &csi.ControllerModifyVolumeRequest{
			VolumeId: testNode + ":tank/csi/keep", MutableParameters: map[string]string{"zfs.compression": "off"}})
		if code(err) != codes.NotFound {
			t.Errorf("modify of the operator's dataset: %v", err)
		}
	})
}
