package forward

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
)

// createRequests are CreateVolume requests with every mix of topology and
// source the owner rule distinguishes.
func createRequests() map[string]*csi.CreateVolumeRequest {
	volumeSource := func(id string) *csi.VolumeContentSource {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
	}
	return map[string]*csi.CreateVolumeRequest{
		"requisite [b s], source on s": {VolumeContentSource: snapshotSource("node-s:tank/csi/v@s"),
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-b", "node-s")}},
		"requisite [b s], preferred [s b], source on s": {VolumeContentSource: volumeSource("node-s:tank/csi/v"),
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-b", "node-s"), Preferred: topology("node-s", "node-b")}},
		"requisite [b], source on s": {VolumeContentSource: snapshotSource("node-s:tank/csi/v@s"),
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-b")}},
		"preferred [c] only":       {AccessibilityRequirements: &csi.TopologyRequirement{Preferred: topology("node-c")}},
		"requisite [c a b]":        {AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-c", "node-a", "node-b")}},
		"no topology, source on s": {VolumeContentSource: snapshotSource("node-s:tank/csi/v@s")},
	}
}

func TestANewVolumeGoesToTheSameNodeWhicheverNodeIsAsked(t *testing.T) {
	for name, req := range createRequests() {
		owners := map[string]bool{}
		for _, receiver := range []string{"node-a", "node-b", "node-c", "node-s"} {
			owners[createOwner(rules.Config{DriverName: "zfs.csi.dev", NodeID: receiver}, req)] = true
		}
		if len(owners) != 1 {
			t.Errorf("%s: the owner depends on the node asked: %v", name, owners)
		}
	}
}

func TestAForwardedCreateVolumeReachesItsOwnerAndIsTakenThere(t *testing.T) {
	// Every request the owner rule sends to a node is one that node's peer
	// side takes, when the caller is the source's node or the source is
	// the owner's: a forwarded call never bounces.
	for name, req := range createRequests() {
		owner := createOwner(rules.Config{DriverName: "zfs.csi.dev", NodeID: "node-x"}, req)
		source := createSourceNode(req)
		if source != "" && source != owner {
			continue // forwarded only from the source's node (the next test)
		}
		if err := createAccepted(rules.Config{DriverName: "zfs.csi.dev", NodeID: owner}, req, "node-x"); err != nil {
			t.Errorf("%s: forwarded to its owner %s, refused there: %v", name, owner, err)
		}
	}
}

func TestThePeerSideTakesOnlyWhatACOsCallCouldHaveBecome(t *testing.T) {
	cfg := rules.Config{DriverName: "zfs.csi.dev", NodeID: "node-b"}
	tests := []struct {
		name   string
		req    *csi.CreateVolumeRequest
		caller string
		taken  bool
	}{
		{"no topology and no source is never forwarded", &csi.CreateVolumeRequest{}, "node-a", false},
		{"no topology, a pull from a third node", &csi.CreateVolumeRequest{VolumeContentSource: snapshotSource("node-s:tank/csi/v@s")}, "node-a", false},
		{"this node in the topology, a pull from a third node", &csi.CreateVolumeRequest{VolumeContentSource: snapshotSource("node-s:tank/csi/v@s"),
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-b")}}, "node-a", false},
		{"this node in the topology, a pull from the caller", &csi.CreateVolumeRequest{VolumeContentSource: snapshotSource("node-a:tank/csi/v@s"),
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-b")}}, "node-a", true},
		{"no topology, a source of this node", &csi.CreateVolumeRequest{VolumeContentSource: snapshotSource("node-b:tank/csi/v@s")}, "node-a", true},
		{"this node in the topology, no source", &csi.CreateVolumeRequest{AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-b")}}, "node-a", true},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			err := createAccepted(cfg, test.req, test.caller)
			if (err == nil) != test.taken {
				t.Errorf("createAccepted: %v, want taken %v", err, test.taken)
			}
			if err != nil && status.Code(err) != codes.PermissionDenied {
				t.Errorf("refused with %v, want PERMISSION_DENIED", status.Code(err))
			}
		})
	}
}

// noPeers fails every connection: nothing may be forwarded.
type noPeers struct{ t *testing.T }

func (p noPeers) Conn(context.Context, string) (grpc.ClientConnInterface, error) {
	p.t.Error("the call was forwarded")
	return nil, status.Error(codes.Unavailable, "no peers")
}

func TestAPullFromAThirdNodeIsAskedOfTheOwnersInstance(t *testing.T) {
	cfg := rules.Config{DriverName: "zfs.csi.dev", NodeID: "node-a"}
	forward := Forward(cfg, noPeers{t})
	req := &csi.CreateVolumeRequest{VolumeContentSource: snapshotSource("node-s:tank/csi/v@s"),
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-b")}}
	_, err := forward(context.Background(), req, &grpc.UnaryServerInfo{FullMethod: csi.Controller_CreateVolume_FullMethodName},
		func(context.Context, any) (any, error) { t.Error("answered here"); return nil, nil })
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), rpc.OtherNodeMarker) {
		t.Errorf("Forward: %v, want UNAVAILABLE with the other-node marker (Nomad tries node-b's instance)", err)
	}
}
