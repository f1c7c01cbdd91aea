package controller

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// ControllerExpandVolume checks the volume_capability the CO passes against
// the volume (the spec's "exceeds capabilities": INVALID_ARGUMENT), by the
// rule ValidateVolumeCapabilities and the node use, and changes nothing
// when the volume cannot serve it.
func TestExpandRefusesACapabilityTheVolumeCannotServe(t *testing.T) {
	multiNode := func(capability *csi.VolumeCapability) *csi.VolumeCapability {
		capability.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
		return capability
	}
	for _, test := range []struct {
		name       string
		made, used *csi.VolumeCapability
		want       codes.Code
	}{
		{"a dataset asked for as a block device", mountCapability(""), blockCapability(), codes.InvalidArgument},
		{"a dataset asked for as ext4", mountCapability(""), mountCapability("ext4"), codes.InvalidArgument},
		{"a raw zvol asked for as a filesystem", blockCapability(), mountCapability("xfs"), codes.InvalidArgument},
		{"an ext4 zvol asked for as a raw block device", mountCapability("ext4"), blockCapability(), codes.InvalidArgument},
		{"an ext4 zvol asked for as xfs", mountCapability("ext4"), mountCapability("xfs"), codes.InvalidArgument},
		{"a dataset asked for by several nodes", mountCapability(""), multiNode(mountCapability("")), codes.InvalidArgument},
		{"a dataset as a dataset", mountCapability(""), mountCapability("zfs"), codes.OK},
		{"an ext4 zvol as ext4", mountCapability("ext4"), mountCapability("ext4"), codes.OK},
		{"a raw zvol as a block device", blockCapability(), blockCapability(), codes.OK},
		{"no capability", mountCapability("ext4"), nil, codes.OK},
	} {
		t.Run(test.name, func(t *testing.T) {
			h := newHarness(t)
			volume := h.create(createRequest("v", 1<<30, test.made))
			dataset := datasetOf(t, volume.GetVolumeId())
			before := capacity(h.dataset(dataset))
			_, err := h.server.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
				VolumeId: volume.GetVolumeId(), CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}, VolumeCapability: test.used})
			if code(err) != test.want {
				t.Fatalf("got %v, want %s", err, test.want)
			}
			after := capacity(h.dataset(dataset))
			if grew := after > before; grew != (test.want == codes.OK) {
				t.Errorf("size %d → %d", before, after)
			}
		})
	}
}
