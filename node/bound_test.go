package node_test

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
)

func TestAMegabyteVolumeIDIsCutInNotFound(t *testing.T) {
	h := newHarness(t)
	_, err := h.server.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{
		VolumeId: strings.Repeat("x", 1<<20), VolumePath: h.dir})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("got %v, want NOT_FOUND", status.Code(err))
	}
	if message := status.Convert(err).Message(); len(message) > rules.MaxEchoedBytes+256 {
		t.Errorf("the message has %d bytes, more than %d", len(message), rules.MaxEchoedBytes+256)
	}
}
