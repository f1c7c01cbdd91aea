package wiring_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/peer"
	"github.com/zfs-csi/zfs-csi/peer/peertest"
	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/wiring"
	"github.com/zfs-csi/zfs-csi/wiring/wiringtest"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// lockedBuffer collects a daemon's log lines from several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// daemon is one node's zfs-csi over its own fake pool: the services on a
// unix socket (what the CO calls) and, when it serves peers, on the peer
// channel with mutual TLS.
type daemon struct {
	cfg        rules.Config
	fake       *zfstest.Fake
	controller csi.ControllerClient
	group      csi.GroupControllerClient
	metadata   csi.SnapshotMetadataClient
	peerAddr   string
	log        *lockedBuffer
	deadlines  chan time.Duration // what ControllerGetVolume's context had left, as its ZFS saw it
}

// deadlineRecorder is a node's ZFS telling the test how much time the
// context of each read of a volume had left: ControllerGetVolume reads its
// volume with its handler's context. Reads past what the test takes are
// not recorded.
type deadlineRecorder struct {
	*zfstest.Fake
	deadlines chan time.Duration
}

func (r deadlineRecorder) List(ctx context.Context, opts zfs.ListOptions) ([]zfs.Dataset, error) {
	if len(opts.Roots) == 1 && strings.HasPrefix(opts.Roots[0], "tank/csi/") {
		var left time.Duration
		if deadline, ok := ctx.Deadline(); ok {
			left = time.Until(deadline)
		}
		select {
		case r.deadlines <- left:
		default:
		}
	}
	return r.Fake.List(ctx, opts)
}

// startDaemon runs nodeID's daemon as the command builds it
// (wiring.NewDaemon). files are its peer credentials (zero: no channel);
// peers are the addresses it dials; serve says whether it serves the
// channel.
func startDaemon(t *testing.T, nodeID string, files peertest.Files, peers map[string][]string, serve bool) *daemon {
	t.Helper()
	d := &daemon{cfg: rules.Config{DriverName: "zfs.csi.dev", Version: "test", NodeID: nodeID, ParentDatasets: []string{"tank/csi"}},
		fake: zfstest.NewFake(map[string]uint64{"tank": 1 << 40}), log: &lockedBuffer{}, deadlines: make(chan time.Duration, 4)}
	if err := d.fake.Create(context.Background(), "tank/csi", zfs.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	channel := peer.Config{NodeID: nodeID, CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA, Peers: peers}
	if serve {
		channel.Listen = "127.0.0.1:0"
	}
	endpoint := "unix://" + filepath.Join(t.TempDir(), "csi.sock")
	running, _ := wiringtest.RunDaemon(t, wiring.DaemonOptions{Config: d.cfg, Log: zerolog.New(d.log), Endpoint: endpoint, Peer: channel,
		ZFS: deadlineRecorder{Fake: d.fake, deadlines: d.deadlines}, Mounter: fakeHost(d.fake),
		Node: node.Options{PathRoots: []string{t.TempDir()}}, ReapInterval: time.Hour, StopTimeout: time.Second})
	d.peerAddr = running.PeerAddress()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	d.controller, d.group, d.metadata = csi.NewControllerClient(conn), csi.NewGroupControllerClient(conn), csi.NewSnapshotMetadataClient(conn)
	return d
}

// volumes are the datasets under the parent, in the fake's order.
func (d *daemon) volumes() []string {
	var names []string
	for _, name := range d.fake.Names() {
		if strings.HasPrefix(name, "tank/csi/") {
			names = append(names, name)
		}
	}
	return names
}

func filesystem(name string, size int64) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}}
}

func onNode(request *csi.CreateVolumeRequest, nodeIDs ...string) *csi.CreateVolumeRequest {
	request.AccessibilityRequirements = &csi.TopologyRequirement{}
	for _, nodeID := range nodeIDs {
		request.AccessibilityRequirements.Requisite = append(request.AccessibilityRequirements.Requisite,
			&csi.Topology{Segments: map[string]string{"zfs.csi.dev/node": nodeID}})
	}
	return request
}

// twoNodes starts node-b serving the channel and node-a dialling it, both
// with certificates from one CA; node-c is a peer node-a has an address
// for where nothing listens.
func twoNodes(t *testing.T) (a, b *daemon) {
	t.Helper()
	ca := peertest.NewCA(t, "cluster")
	b = startDaemon(t, "node-b", ca.Node(t, "node-b", peer.NodeURIPrefix+"node-b"), nil, true)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	a = startDaemon(t, "node-a", ca.Node(t, "node-a", peer.NodeURIPrefix+"node-a"),
		map[string][]string{"node-b": {b.peerAddr}, "node-c": {closed.Addr().String()}}, false)
	return a, b
}

// long: subtests on one shared fixture, one behaviour each
func TestControllerCallsForAnotherNodesVolumeAreAnsweredByThatNode(t *testing.T) {
	a, b := twoNodes(t)
	ctx := t.Context()

	created, err := a.controller.CreateVolume(ctx, onNode(filesystem("data", 1<<30), "node-b"))
	if err != nil {
		t.Fatalf("CreateVolume on node-b through node-a: %v", err)
	}
	volumeID := created.GetVolume().GetVolumeId()
	if !strings.HasPrefix(volumeID, "node-b:") || len(b.volumes()) != 1 || len(a.volumes()) != 0 {
		t.Fatalf("a volume for node-b made through node-a: ID %q, node-b has %v, node-a has %v", volumeID, b.volumes(), a.volumes())
	}
	dataset := b.volumes()[0]

	t.Run("expansion grows the volume on its node", func(t *testing.T) {
		grown, err := a.controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: volumeID,
			CapacityRange: &csi.CapacityRange{RequiredBytes: 3 << 30}})
		if err != nil {
			t.Fatal(err)
		}
		if grown.GetCapacityBytes() != 3<<30 || b.fake.Property(dataset, "refquota") != "3221225472" {
			t.Errorf("capacity %d, refquota on node-b %s; want 3 GiB", grown.GetCapacityBytes(), b.fake.Property(dataset, "refquota"))
		}
	})

	t.Run("a modification sets the property on the volume's node", func(t *testing.T) {
		if _, err := a.controller.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: volumeID,
			MutableParameters: map[string]string{"zfs.compression": "zstd"}}); err != nil {
			t.Fatal(err)
		}
		if got := b.fake.Property(dataset, "compression"); got != "zstd" {
			t.Errorf("compression on node-b = %q, want zstd", got)
		}
	})

	t.Run("the peer answers within the caller's deadline", func(t *testing.T) {
		for len(b.deadlines) > 0 {
			<-b.deadlines // the reads of the calls before
		}
		deadlineCtx, cancel := context.WithTimeout(ctx, 40*time.Second)
		defer cancel()
		got, err := a.controller.ControllerGetVolume(deadlineCtx, &csi.ControllerGetVolumeRequest{VolumeId: volumeID})
		if err != nil || got.GetVolume().GetVolumeId() != volumeID {
			t.Fatalf("ControllerGetVolume = %v, %v", got, err)
		}
		if left := <-b.deadlines; left <= 0 || left > 40*time.Second {
			t.Errorf("node-b's handler had %v left, want the caller's deadline (at most 40s)", left)
		}
	})

	var snapshotID string
	t.Run("snapshots are taken, listed and read on the volume's node", func(t *testing.T) {
		taken, err := a.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: volumeID})
		if err != nil {
			t.Fatal(err)
		}
		snapshotID = taken.GetSnapshot().GetSnapshotId()
		if !strings.HasPrefix(snapshotID, "node-b:") || !b.fake.Exists(strings.TrimPrefix(snapshotID, "node-b:")) {
			t.Fatalf("snapshot %q is not on node-b (%v)", snapshotID, b.fake.Names())
		}
		listed, err := a.controller.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: volumeID})
		if err != nil || len(listed.GetEntries()) != 1 || listed.GetEntries()[0].GetSnapshot().GetSnapshotId() != snapshotID {
			t.Errorf("ListSnapshots by source = %v, %v; want the snapshot", listed, err)
		}
		byID, err := a.controller.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: snapshotID})
		if err != nil || len(byID.GetEntries()) != 1 {
			t.Errorf("ListSnapshots by ID = %v, %v; want the snapshot", byID, err)
		}
		if got, err := a.controller.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: snapshotID}); err != nil || got.GetSnapshot().GetSnapshotId() != snapshotID {
			t.Errorf("GetSnapshot = %v, %v", got, err)
		}
	})

	t.Run("a volume from the snapshot is made on the snapshot's node", func(t *testing.T) {
		request := filesystem("restored", 1<<30)
		request.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshotID}}}
		restored, err := a.controller.CreateVolume(ctx, request)
		if err != nil {
			t.Fatal(err)
		}
		restoredID := restored.GetVolume().GetVolumeId()
		source := b.fake.Property(strings.TrimPrefix(restoredID, "node-b:"), rules.NewUserProps("zfs.csi.dev").Source)
		if !strings.HasPrefix(restoredID, "node-b:") || source != snapshotID || len(a.volumes()) != 0 {
			t.Errorf("restored %q made from %q (want the snapshot, on node-b); node-a has %v", restoredID, source, a.volumes())
		}
		if _, err := a.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: restoredID}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a group snapshot of the node's volumes is taken there", func(t *testing.T) {
		group, err := a.group.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "group", SourceVolumeIds: []string{volumeID}})
		if err != nil {
			t.Fatal(err)
		}
		groupID := group.GetGroupSnapshot().GetGroupSnapshotId()
		if _, err := a.group.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: groupID,
			SnapshotIds: []string{group.GetGroupSnapshot().GetSnapshots()[0].GetSnapshotId()}}); err != nil {
			t.Errorf("GetVolumeGroupSnapshot: %v", err)
		}
		if _, err := a.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: groupID,
			SnapshotIds: []string{group.GetGroupSnapshot().GetSnapshots()[0].GetSnapshotId()}}); err != nil {
			t.Errorf("DeleteVolumeGroupSnapshot: %v", err)
		}
	})

	t.Run("the peer's refusal comes back with its code, naming the node", func(t *testing.T) {
		_, err := a.controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "node-b:tank/csi/missing",
			CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `node "node-b"`) {
			t.Errorf("expanding a volume node-b does not have: %v, want NOT_FOUND from node-b", err)
		}
	})

	t.Run("calls that name no node stay on the node they reach", func(t *testing.T) {
		listed, err := a.controller.ListVolumes(ctx, &csi.ListVolumesRequest{})
		if err != nil || len(listed.GetEntries()) != 0 {
			t.Errorf("node-a's ListVolumes = %v, %v; want node-a's (none)", listed, err)
		}
		if _, err := a.controller.CreateVolume(ctx, filesystem("local", 1<<30)); err != nil || len(a.volumes()) != 1 {
			t.Errorf("a CreateVolume naming no node: %v, node-a has %v", err, a.volumes())
		}
	})

	t.Run("deletion destroys the volume on its node", func(t *testing.T) {
		if _, err := a.controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snapshotID}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volumeID}); err != nil {
			t.Fatal(err)
		}
		if b.fake.Exists(dataset) {
			t.Errorf("%s is still on node-b: %v", dataset, b.fake.Names())
		}
	})

	if !strings.Contains(a.log.String(), `"forwarded_to":"node-b"`) {
		t.Errorf("node-a's log does not name node-b for the forwarded calls:\n%s", a.log.String())
	}
	// The channel's own interceptors (its log line names the calling node
	// from its certificate) run around the forwarded calls too.
	if !strings.Contains(b.log.String(), `"caller":"node-a"`) {
		t.Errorf("node-b's peer channel logged no call from node-a:\n%s", b.log.String())
	}
}

func TestForwardedSecretsReachThePeerAndNoLog(t *testing.T) {
	a, b := twoNodes(t)
	const passphrase = "correct horse battery staple"
	request := onNode(filesystem("secret", 1<<30), "node-b")
	request.Parameters = map[string]string{"encryption": "on"}
	request.Secrets = map[string]string{rules.SecretPassphrase: passphrase}
	created, err := a.controller.CreateVolume(t.Context(), request)
	if err != nil {
		t.Fatal(err)
	}
	dataset := strings.TrimPrefix(created.GetVolume().GetVolumeId(), "node-b:")
	if got := string(b.fake.Key(dataset)); got != passphrase {
		t.Errorf("node-b's volume is keyed with %q, want the caller's passphrase", got)
	}
	for name, log := range map[string]string{"node-a": a.log.String(), "node-b": b.log.String()} {
		if strings.Contains(log, passphrase) {
			t.Errorf("%s logged the passphrase:\n%s", name, log)
		}
	}
}

func TestCallsThatCannotBeForwardedAreRetryable(t *testing.T) {
	a, _ := twoNodes(t)
	for name, volumeID := range map[string]string{
		"a node with no address":       "node-z:tank/csi/v",
		"a node where nothing listens": "node-c:tank/csi/v",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := a.controller.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: volumeID})
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), rpc.OtherNodeMarker) {
				t.Errorf("DeleteVolume(%s) = %v, want UNAVAILABLE with %q", volumeID, err, rpc.OtherNodeMarker)
			}
			if rpc.RefusedForOtherNode(err) {
				t.Errorf("DeleteVolume(%s) = %v counts as a refusal, not as the failure it is", volumeID, err)
			}
		})
	}
}

func TestWithoutTheChannelAnotherNodesVolumeIsRefusedAsBefore(t *testing.T) {
	alone := startDaemon(t, "node-a", peertest.Files{}, nil, false)
	_, err := alone.controller.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: "node-b:tank/csi/v"})
	if status.Code(err) != codes.FailedPrecondition || !rpc.RefusedForOtherNode(err) {
		t.Errorf("DeleteVolume of node-b's volume = %v, want the refusal (FAILED_PRECONDITION, %q)", err, rpc.OtherNodeMarker)
	}
}

func TestThePeerChannelTakesOnlyCallsForItsNode(t *testing.T) {
	ca := peertest.NewCA(t, "cluster")
	b := startDaemon(t, "node-b", ca.Node(t, "node-b", peer.NodeURIPrefix+"node-b"), nil, true)
	files := ca.Node(t, "node-a", peer.NodeURIPrefix+"node-a")
	dialer := peer.NewClient(peer.Config{NodeID: "node-a", CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA,
		Peers: map[string][]string{"node-b": {b.peerAddr}}})
	t.Cleanup(func() { dialer.Close() })
	conn, err := dialer.Dial(t.Context(), "node-b")
	if err != nil {
		t.Fatal(err)
	}
	controller := csi.NewControllerClient(conn)

	t.Run("a list is not a forwarded call", func(t *testing.T) {
		if _, err := controller.ListVolumes(t.Context(), &csi.ListVolumesRequest{}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("ListVolumes over the channel = %v, want PERMISSION_DENIED", err)
		}
	})
	t.Run("a call naming a third node is refused, not passed on", func(t *testing.T) {
		_, err := controller.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: "node-c:tank/csi/v"})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("DeleteVolume of node-c's volume at node-b = %v, want PERMISSION_DENIED", err)
		}
	})
	t.Run("a stream naming a third node is refused, not passed on", func(t *testing.T) {
		_, err := allocated(t, csi.NewSnapshotMetadataClient(conn), "node-c:tank/csi/v@s")
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("GetMetadataAllocated of node-c's snapshot at node-b = %v, want PERMISSION_DENIED", err)
		}
	})
	t.Run("a call naming the node is answered", func(t *testing.T) {
		if _, err := controller.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: "node-b:tank/csi/gone"}); err != nil {
			t.Errorf("DeleteVolume of a volume node-b does not have = %v, want OK (idempotent)", err)
		}
	})
}

// allocated collects a GetMetadataAllocated stream's extents.
func allocated(t *testing.T, client csi.SnapshotMetadataClient, snapshotID string) ([]*csi.BlockMetadata, error) {
	t.Helper()
	stream, err := client.GetMetadataAllocated(t.Context(), &csi.GetMetadataAllocatedRequest{SnapshotId: snapshotID})
	if err != nil {
		return nil, err
	}
	var extents []*csi.BlockMetadata
	for {
		response, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return extents, nil
		}
		if err != nil {
			return extents, err
		}
		extents = append(extents, response.GetBlockMetadata()...)
	}
}

func TestSnapshotMetadataOfAnotherNodesSnapshotStreamsFromThatNode(t *testing.T) {
	a, b := twoNodes(t)
	request := onNode(filesystem("disk", 1<<20), "node-b")
	request.VolumeCapabilities = []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}
	request.Parameters = map[string]string{"volblocksize": "16384"}
	created, err := a.controller.CreateVolume(t.Context(), request)
	if err != nil {
		t.Fatal(err)
	}
	volumeID := created.GetVolume().GetVolumeId()
	if err := b.fake.WriteBlocks(strings.TrimPrefix(volumeID, "node-b:"), 16384, 3*16384); err != nil {
		t.Fatal(err)
	}
	taken, err := a.controller.CreateSnapshot(t.Context(), &csi.CreateSnapshotRequest{Name: "blocks", SourceVolumeId: volumeID})
	if err != nil {
		t.Fatal(err)
	}
	snapshotID := taken.GetSnapshot().GetSnapshotId()

	t.Run("the extents are node-b's own answer", func(t *testing.T) {
		want, err := allocated(t, b.metadata, snapshotID)
		if err != nil || len(want) == 0 {
			t.Fatalf("node-b's own answer: %v, %v", want, err)
		}
		got, err := allocated(t, a.metadata, snapshotID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || got[0].GetByteOffset() != want[0].GetByteOffset() || got[0].GetSizeBytes() != want[0].GetSizeBytes() {
			t.Errorf("through node-a: %v, node-b says %v", got, want)
		}
	})
	t.Run("a delta between two of node-b's snapshots is node-b's own answer", func(t *testing.T) {
		if err := b.fake.WriteBlocks(strings.TrimPrefix(volumeID, "node-b:"), 8*16384, 16384); err != nil {
			t.Fatal(err)
		}
		later, err := a.controller.CreateSnapshot(t.Context(), &csi.CreateSnapshotRequest{Name: "later", SourceVolumeId: volumeID})
		if err != nil {
			t.Fatal(err)
		}
		delta := func(client csi.SnapshotMetadataClient) []*csi.BlockMetadata {
			stream, err := client.GetMetadataDelta(t.Context(), &csi.GetMetadataDeltaRequest{BaseSnapshotId: snapshotID,
				TargetSnapshotId: later.GetSnapshot().GetSnapshotId()})
			if err != nil {
				t.Fatal(err)
			}
			var extents []*csi.BlockMetadata
			for {
				response, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					return extents
				}
				if err != nil {
					t.Fatal(err)
				}
				extents = append(extents, response.GetBlockMetadata()...)
			}
		}
		want, got := delta(b.metadata), delta(a.metadata)
		if len(want) != 1 || want[0].GetByteOffset() != 8*16384 || len(got) != 1 || got[0].GetByteOffset() != want[0].GetByteOffset() {
			t.Errorf("the delta through node-a is %v, node-b's own %v; want the one block written", got, want)
		}
	})
	t.Run("node-b's refusal comes back with its code", func(t *testing.T) {
		_, err := allocated(t, a.metadata, "node-b:tank/csi/missing@none")
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `node "node-b"`) {
			t.Errorf("a snapshot node-b does not have: %v, want NOT_FOUND from node-b", err)
		}
	})
	for _, node := range []string{"node-c", "node-z"} {
		t.Run("a node that cannot be reached is UNAVAILABLE: "+node, func(t *testing.T) {
			_, err := allocated(t, a.metadata, node+":tank/csi/v@s")
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), rpc.OtherNodeMarker) {
				t.Errorf("%s's snapshot: %v, want UNAVAILABLE", node, err)
			}
		})
	}
}
