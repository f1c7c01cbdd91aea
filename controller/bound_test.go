package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
)

// TestCallersStringsAreCutInErrorMessages sends 1 MiB where every request
// string goes and expects an error message that repeats at most
// rules.MaxEchoedBytes of each (the server's own cut of whole messages,
// MaxMessageBytes, is only the backstop).
//
// long: a table of requests, one a string field a row
func TestCallersStringsAreCutInErrorMessages(t *testing.T) {
	const bound = 3*rules.MaxEchoedBytes + 512
	huge := strings.Repeat("x", 1<<20)
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	ctx := context.Background()
	withParameters := func(parameters, mutable map[string]string) *csi.CreateVolumeRequest {
		req := createRequest("w", 1<<30, mountCapability(""))
		req.Parameters, req.MutableParameters = parameters, mutable
		return req
	}
	fromSnapshot := createRequest("w", 1<<30, mountCapability(""))
	fromSnapshot.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: huge}}}
	group := h.server.Group()
	tests := []struct {
		name string
		call func() error
	}{
		{"a volume name", func() error {
			_, err := h.server.CreateVolume(ctx, createRequest(huge, 1<<30, mountCapability("")))
			return err
		}},
		{"a filesystem type", func() error {
			_, err := h.server.CreateVolume(ctx, createRequest("w", 1<<30, mountCapability(huge)))
			return err
		}},
		{"a content source ID", func() error { _, err := h.server.CreateVolume(ctx, fromSnapshot); return err }},
		{"a parameter's name", func() error {
			_, err := h.server.CreateVolume(ctx, withParameters(map[string]string{huge: "1"}, nil))
			return err
		}},
		{"a parameter's value", func() error {
			_, err := h.server.CreateVolume(ctx, withParameters(map[string]string{ParamParentDataset: huge}, nil))
			return err
		}},
		{"a property's name", func() error {
			_, err := h.server.CreateVolume(ctx, withParameters(map[string]string{PropertyPrefix + huge: "1"}, nil))
			return err
		}},
		{"a user property's name", func() error {
			_, err := h.server.CreateVolume(ctx, withParameters(map[string]string{PropertyPrefix + "com.example:" + huge: "1"}, nil))
			return err
		}},
		{"a pool property's value", func() error {
			_, err := h.server.CreateVolume(ctx, withParameters(map[string]string{"zfs.dedup": huge[:8000]}, nil))
			return err
		}},
		{"a mutable parameter's name", func() error {
			_, err := h.server.CreateVolume(ctx, withParameters(nil, map[string]string{huge: "1"}))
			return err
		}},
		{"a volume ID to read", func() error {
			_, err := h.server.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: huge})
			return err
		}},
		{"a volume ID to expand", func() error {
			_, err := h.server.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: huge, CapacityRange: &csi.CapacityRange{}})
			return err
		}},
		{"a volume ID to modify", func() error {
			_, err := h.server.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: huge, MutableParameters: map[string]string{"zfs.atime": "on"}})
			return err
		}},
		{"a snapshot's source volume ID", func() error {
			_, err := h.server.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: huge})
			return err
		}},
		{"a volume listing's token", func() error {
			_, err := h.server.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: huge})
			return err
		}},
		{"a volume ID to validate", func() error {
			_, err := h.server.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: huge,
				VolumeCapabilities: []*csi.VolumeCapability{mountCapability("")}})
			return err
		}},
		{"a group snapshot's source volume ID", func() error {
			_, err := group.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{huge}})
			return err
		}},
		{"a group snapshot ID", func() error {
			_, err := group.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: huge})
			return err
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			err := test.call()
			if status.Code(rpc.Status(err)) == codes.OK {
				t.Fatal("the call succeeded")
			}
			if message := status.Convert(rpc.Status(err)).Message(); len(message) > bound {
				t.Errorf("the message has %d bytes, more than %d: %.200s…", len(message), bound, message)
			}
		})
	}
	t.Run("a volume context value ValidateVolumeCapabilities compares", func(t *testing.T) {
		response, err := h.server.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: volume.GetVolumeId(),
			VolumeCapabilities: []*csi.VolumeCapability{mountCapability("")}, VolumeContext: map[string]string{rules.ContextKind: huge}})
		if err != nil {
			t.Fatal(err)
		}
		if message := response.GetMessage(); message == "" || len(message) > bound {
			t.Errorf("the message has %d bytes, want 1 to %d", len(message), bound)
		}
	})
}
