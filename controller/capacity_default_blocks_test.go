package controller

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// GetCapacity's maximum_volume_size is a size CreateVolume can make. A zvol
// made without a volblocksize parameter gets the ZFS version's default, and
// OpenZFS 2.1's (8 KiB) reserves the most metadata: a maximum counted with
// 2.2's 16 KiB does not fit on 2.1.
func TestTheLargestThickZvolGetCapacityOffersFitsOnEveryZFSVersion(t *testing.T) {
	for _, version := range []string{"OpenZFS 2.1", "OpenZFS 2.2 and later"} {
		t.Run(version, func(t *testing.T) {
			h := newHarness(t)
			if version == "OpenZFS 2.1" {
				h.fake.PlayBefore22()
			}
			response, err := h.server.GetCapacity(context.Background(), &csi.GetCapacityRequest{
				VolumeCapabilities: []*csi.VolumeCapability{blockCapability()}})
			if err != nil {
				t.Fatal(err)
			}
			largest := response.GetMaximumVolumeSize().GetValue()
			if largest <= 0 || largest > response.GetAvailableCapacity() {
				t.Fatalf("maximum_volume_size %d of %d available", largest, response.GetAvailableCapacity())
			}
			_, err = h.server.CreateVolume(context.Background(), createRequest("largest", largest, blockCapability()))
			if err != nil {
				t.Errorf("GetCapacity offered %d bytes, and CreateVolume of that size fails: %v", largest, err)
			}
		})
	}
}
