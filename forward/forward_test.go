package forward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

func topology(nodeIDs ...string) []*csi.Topology {
	var topologies []*csi.Topology
	for _, nodeID := range nodeIDs {
		topologies = append(topologies, &csi.Topology{Segments: map[string]string{"zfs.csi.dev/node": nodeID}})
	}
	return topologies
}

func snapshotSource(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

func TestEachCallBelongsToTheNodeItsIDsName(t *testing.T) {
	cfg := rules.Config{DriverName: "zfs.csi.dev", NodeID: "node-a"}
	tests := []struct {
		name   string
		method string
		req    any
		want   string
	}{
		{"a deletion: the volume's node", csi.Controller_DeleteVolume_FullMethodName, &csi.DeleteVolumeRequest{VolumeId: "node-b:tank/csi/v"}, "node-b"},
		{"a malformed volume ID: no node (the handler answers)", csi.Controller_DeleteVolume_FullMethodName, &csi.DeleteVolumeRequest{VolumeId: "tank/csi/v"}, ""},
		{"an expansion", csi.Controller_ControllerExpandVolume_FullMethodName, &csi.ControllerExpandVolumeRequest{VolumeId: "node-b:tank/csi/v"}, "node-b"},
		{"a modification", csi.Controller_ControllerModifyVolume_FullMethodName, &csi.ControllerModifyVolumeRequest{VolumeId: "node-c:tank/csi/v"}, "node-c"},
		{"a validation", csi.Controller_ValidateVolumeCapabilities_FullMethodName, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "node-b:tank/csi/v"}, "node-b"},
		{"a volume's health", csi.Controller_ControllerGetVolumeHealth_FullMethodName, &csi.ControllerGetVolumeHealthRequest{VolumeId: "node-b:tank/csi/v"}, "node-b"},
		{"a snapshot: its source's node", csi.Controller_CreateSnapshot_FullMethodName, &csi.CreateSnapshotRequest{SourceVolumeId: "node-b:tank/csi/v"}, "node-b"},
		{"a snapshot's deletion", csi.Controller_DeleteSnapshot_FullMethodName, &csi.DeleteSnapshotRequest{SnapshotId: "node-b:tank/csi/v@s"}, "node-b"},
		{"a snapshot ID without '@' names no node", csi.Controller_DeleteSnapshot_FullMethodName, &csi.DeleteSnapshotRequest{SnapshotId: "node-b:tank/csi/v"}, ""},
		{"a snapshot list by ID, before its source", csi.Controller_ListSnapshots_FullMethodName,
			&csi.ListSnapshotsRequest{SnapshotId: "node-c:tank/csi/v@s", SourceVolumeId: "node-b:tank/csi/v"}, "node-c"},
		{"a snapshot list by source", csi.Controller_ListSnapshots_FullMethodName, &csi.ListSnapshotsRequest{SourceVolumeId: "node-b:tank/csi/v"}, "node-b"},
		{"a list of every snapshot names none", csi.Controller_ListSnapshots_FullMethodName, &csi.ListSnapshotsRequest{}, ""},
		{"a group snapshot of one node's volumes", csi.GroupController_CreateVolumeGroupSnapshot_FullMethodName,
			&csi.CreateVolumeGroupSnapshotRequest{SourceVolumeIds: []string{"node-b:tank/csi/v", "node-b:tank/csi/w"}}, "node-b"},
		{"a group snapshot across nodes names none (the handler refuses it)", csi.GroupController_CreateVolumeGroupSnapshot_FullMethodName,
			&csi.CreateVolumeGroupSnapshotRequest{SourceVolumeIds: []string{"node-b:tank/csi/v", "node-c:tank/csi/w"}}, ""},
		{"a group snapshot's deletion", csi.GroupController_DeleteVolumeGroupSnapshot_FullMethodName,
			&csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: "node-b:tank#g"}, "node-b"},
		{"a new volume naming nothing is this node's", csi.Controller_CreateVolume_FullMethodName, &csi.CreateVolumeRequest{Name: "v"}, "node-a"},
		{"a new volume whose topology allows several nodes goes to the first, whichever node is asked", csi.Controller_CreateVolume_FullMethodName,
			&csi.CreateVolumeRequest{AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-b", "node-a")}}, "node-b"},
		{"a preferred node comes before the source's", csi.Controller_CreateVolume_FullMethodName,
			&csi.CreateVolumeRequest{VolumeContentSource: snapshotSource("node-c:tank/csi/v@s"),
				AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-b", "node-c"), Preferred: topology("node-b", "node-c")}}, "node-b"},
		{"a new volume on other nodes goes to the first preferred one", csi.Controller_CreateVolume_FullMethodName,
			&csi.CreateVolumeRequest{AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-b", "node-c"), Preferred: topology("node-c", "node-b")}}, "node-c"},
		{"a new volume on other nodes without preference goes to the first requisite one", csi.Controller_CreateVolume_FullMethodName,
			&csi.CreateVolumeRequest{AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-b", "node-c")}}, "node-b"},
		{"a topology naming no valid node names none", csi.Controller_CreateVolume_FullMethodName,
			&csi.CreateVolumeRequest{AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("-bad")}}, ""},
		{"a restore goes to its snapshot's node", csi.Controller_CreateVolume_FullMethodName,
			&csi.CreateVolumeRequest{VolumeContentSource: snapshotSource("node-b:tank/csi/v@s")}, "node-b"},
		{"a clone goes to its volume's node when the topology allows it", csi.Controller_CreateVolume_FullMethodName,
			&csi.CreateVolumeRequest{VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
				Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "node-b:tank/csi/v"}}},
				AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-a", "node-b")}}, "node-b"},
		{"a restore whose topology allows only this node stays here (a transfer)", csi.Controller_CreateVolume_FullMethodName,
			&csi.CreateVolumeRequest{VolumeContentSource: snapshotSource("node-b:tank/csi/v@s"),
				AccessibilityRequirements: &csi.TopologyRequirement{Requisite: topology("node-a")}}, "node-a"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			route, named := routes[test.method]
			if !named {
				t.Fatalf("%s has no route", test.method)
			}
			if got := route.owner(cfg, test.req); got != test.want {
				t.Errorf("owner = %q, want %q", got, test.want)
			}
		})
	}
	for _, local := range []string{csi.Controller_ListVolumes_FullMethodName, csi.Controller_GetCapacity_FullMethodName,
		csi.Controller_ControllerGetCapabilities_FullMethodName, csi.Controller_ControllerListVolumeHealth_FullMethodName} {
		if _, named := routes[local]; named {
			t.Errorf("%s names no node but has a route", local)
		}
	}
}

// panickingController panics in DeleteVolume; ControllerGetVolume fails
// with a typed zfs error.
type panickingController struct {
	csi.UnimplementedControllerServer
}

func (panickingController) ControllerGetVolume(context.Context, *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	return nil, fmt.Errorf("reading it: %w", zfs.ErrNotFound)
}

func (panickingController) DeleteVolume(context.Context, *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	panic("boom")
}

func TestPeerServicesAnswerOnlyForTheirNodeWithMappedCodes(t *testing.T) {
	plain := grpc.NewServer() // no interceptors of its own: the services bring theirs
	RegisterPeerServices(plain, rules.Config{NodeID: "node-a"}, rpc.Services{Controller: panickingController{}}, func(context.Context) (string, error) { return "node-b", nil })
	client := csi.NewControllerClient(serve(t, plain))

	var trailer metadata.MD
	_, err := client.ControllerGetVolume(t.Context(), &csi.ControllerGetVolumeRequest{VolumeId: "node-a:tank/v"}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.NotFound {
		t.Errorf("a typed zfs error over the channel = %v, want NOT_FOUND", err)
	}
	if got := trailer.Get(answeredByKey); len(got) != 1 || got[0] != "node-a" {
		t.Errorf("the answer is marked %v, want node-a", got)
	}
	if _, err := client.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: "node-a:tank/v"}); status.Code(err) != codes.Internal {
		t.Errorf("a panic over the channel = %v, want INTERNAL", err)
	}
	if _, err := client.ListVolumes(t.Context(), &csi.ListVolumesRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("ListVolumes over the channel = %v, want PERMISSION_DENIED", err)
	}
}

// trailerStream is a server stream that only keeps its trailer.
// serve serves server on a socket of the test's and returns a client
// connection to it; both go when the test ends.
func serve(t *testing.T, server *grpc.Server) *grpc.ClientConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "peer.sock")
	listener, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go server.Serve(listener)
	t.Cleanup(server.Stop)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

type trailerStream struct {
	grpc.ServerStream
	trailer metadata.MD
}

func (s *trailerStream) SetTrailer(md metadata.MD) { s.trailer = metadata.Join(s.trailer, md) }

func TestPeerStreamsWithoutARouteAreRefused(t *testing.T) {
	called := false
	desc := withStreamCheck(&grpc.ServiceDesc{ServiceName: "csi.v1.Future", Streams: []grpc.StreamDesc{{StreamName: "Watch",
		Handler: func(any, grpc.ServerStream) error { called = true; return nil }}}}, rules.Config{NodeID: "node-a"})
	stream := &trailerStream{}
	err := desc.Streams[0].Handler(nil, stream)
	if status.Code(err) != codes.PermissionDenied || called {
		t.Errorf("a stream without a route: %v (handler called: %v), want PERMISSION_DENIED before the handler", err, called)
	}
	if got := stream.trailer.Get(answeredByKey); len(got) != 1 {
		t.Errorf("the refusal is marked %v, want node-a's", got)
	}
}

// requestStream is a server stream whose client sent one request.
type requestStream struct {
	trailerStream
	request proto.Message
	sent    []any
}

func (s *requestStream) RecvMsg(m any) error {
	if s.request == nil {
		return io.EOF
	}
	proto.Merge(m.(proto.Message), s.request)
	s.request = nil
	return nil
}

func (s *requestStream) SendMsg(m any) error {
	s.sent = append(s.sent, m)
	return nil
}

func TestPeerStreamsMapTypedErrors(t *testing.T) {
	desc := withStreamCheck(&grpc.ServiceDesc{ServiceName: "csi.v1.SnapshotMetadata", Streams: []grpc.StreamDesc{{StreamName: "GetMetadataAllocated",
		Handler: func(any, grpc.ServerStream) error { return fmt.Errorf("reading it: %w", zfs.ErrNotFound) }}}}, rules.Config{NodeID: "node-a"})
	stream := &requestStream{request: &csi.GetMetadataAllocatedRequest{SnapshotId: "node-a:tank/csi/v@s"}}
	if err := desc.Streams[0].Handler(nil, stream); status.Code(err) != codes.NotFound {
		t.Errorf("a typed zfs error over the channel = %v, want NOT_FOUND", err)
	}
}

func TestTheHandlerGetsTheRequestReadAheadThenTheStreamsOwn(t *testing.T) {
	replay := &replayStream{ServerStream: &requestStream{}, first: &csi.GetMetadataAllocatedRequest{SnapshotId: "n:tank/v@s"}}
	var got csi.GetMetadataAllocatedRequest
	if err := replay.RecvMsg(&got); err != nil || got.GetSnapshotId() != "n:tank/v@s" {
		t.Errorf("first RecvMsg = %v, %v; want the request read ahead", &got, err)
	}
	if err := replay.RecvMsg(&got); !errors.Is(err, io.EOF) {
		t.Errorf("second RecvMsg = %v, want the stream's own answer (EOF)", err)
	}
}

func TestARelayStopsWhenTheCallerIsGone(t *testing.T) {
	gone := errors.New("the caller went away")
	received := 0
	err := relay(func() (*csi.GetMetadataAllocatedResponse, error) {
		received++
		if received > 10 {
			return nil, io.EOF
		}
		return &csi.GetMetadataAllocatedResponse{}, nil
	}, func(any) error { return gone })
	if !errors.Is(err, gone) || received != 1 {
		t.Errorf("relay = %v after %d messages, want the send error after the first", err, received)
	}
}
