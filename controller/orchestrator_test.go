package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// What the real sidecars and orchestrators send, and what they need back
// (defects only a real kubelet, provisioner or Nomad would show).

func TestGetCapacityAnswersForEveryStorageClassWithoutCapabilities(t *testing.T) {
	// external-provisioner's capacity tracking sends a StorageClass's
	// parameters and no capabilities: a zvol-only or dataset-only
	// parameter must not be refused, or no CSIStorageCapacity is published.
	for name, parameters := range map[string]map[string]string{
		"zfs-block (volblocksize)":   {ParamVolBlockSize: "16K"},
		"a zvol-only ZFS property":   {"zfs.volmode": "dev"},
		"a dataset-only property":    {"zfs.recordsize": "16K"},
		"zfs-dataset (no parameter)": nil,
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			response, err := h.server.GetCapacity(context.Background(), &csi.GetCapacityRequest{Parameters: parameters})
			if err != nil || response.GetAvailableCapacity() <= 0 || response.GetMaximumVolumeSize().GetValue() <= 0 {
				t.Fatalf("got %v, %v", response, err)
			}
		})
	}
	t.Run("parameters no volume could have are still refused", func(t *testing.T) {
		h := newHarness(t)
		_, err := h.server.GetCapacity(context.Background(), &csi.GetCapacityRequest{
			Parameters: map[string]string{ParamVolBlockSize: "16K", "zfs.recordsize": "16K"}})
		if code(err) != codes.InvalidArgument {
			t.Errorf("got %v, want InvalidArgument", err)
		}
	})
	t.Run("the largest thick zvol fits, with its reservation", func(t *testing.T) {
		h := newHarness(t)
		response, err := h.server.GetCapacity(context.Background(), &csi.GetCapacityRequest{
			VolumeCapabilities: []*csi.VolumeCapability{blockCapability()}, Parameters: map[string]string{ParamVolBlockSize: "8K"}})
		if err != nil {
			t.Fatal(err)
		}
		largest := response.GetMaximumVolumeSize().GetValue()
		if largest >= response.GetAvailableCapacity() {
			t.Fatalf("maximum %d leaves no room for the reservation of %d available", largest, response.GetAvailableCapacity())
		}
		req := createRequest("largest", largest, blockCapability())
		req.Parameters = map[string]string{ParamVolBlockSize: "8K"}
		h.create(req)
		req = createRequest("too-large", largest+16<<10, blockCapability())
		req.Parameters = map[string]string{ParamVolBlockSize: "8K"}
		if _, err := h.server.CreateVolume(context.Background(), req); code(err) != codes.ResourceExhausted {
			t.Errorf("one block more: got %v, want RESOURCE_EXHAUSTED", err)
		}
	})
	t.Run("the smallest volume follows the filesystem", func(t *testing.T) {
		h := newHarness(t)
		response, err := h.server.GetCapacity(context.Background(), &csi.GetCapacityRequest{
			VolumeCapabilities: []*csi.VolumeCapability{mountCapability("xfs")}})
		if err != nil || response.GetMinimumVolumeSize().GetValue() != 300<<20 {
			t.Errorf("got %v, %v; want a minimum of 300 MiB for xfs", response, err)
		}
	})
}

func TestASourceOnAnotherNodeIsResourceExhaustedNotNotFound(t *testing.T) {
	h := newHarness(t)
	for _, source := range []*csi.VolumeContentSource{
		{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "node-b:tank/csi/v@s"}}},
		{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "node-b:tank/csi/v"}}},
	} {
		req := createRequest("restore", 1<<30, mountCapability(""))
		req.VolumeContentSource = source
		_, err := h.server.CreateVolume(context.Background(), req)
		if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `"node-b"`) {
			t.Errorf("%v: got %v, want RESOURCE_EXHAUSTED naming node-b (NOT_FOUND is final for the provisioner)", source, err)
		}
	}
	if h.fake.TotalCalls() != 0 {
		t.Errorf("ran %v for a source it cannot use", h.fake.Calls())
	}
}

func TestACloneCannotCrossPoolsAndIsRefusedBeforeAnyCommand(t *testing.T) {
	h := newTwoPoolHarness(t)
	source := h.create(createRequest("v", 1<<30, mountCapability("")))
	snapshot := h.snapshot("s", source.GetVolumeId())
	h.fake.ResetCalls()
	req := fromSnapshot(createRequest("c", 1<<30, mountCapability("")), snapshot.GetSnapshotId())
	req.Parameters = map[string]string{ParamParentDataset: "other/csi"}
	if _, err := h.server.CreateVolume(context.Background(), req); code(err) != codes.InvalidArgument || h.fake.TotalCalls() != 0 {
		t.Errorf("got %v after %v, want InvalidArgument before any command", err, h.fake.Calls())
	}
	req.Parameters[ParamSourceMode] = "copy"
	if _, err := h.server.CreateVolume(context.Background(), req); err != nil {
		t.Errorf("a copy may cross pools: %v", err)
	}
}

func TestSnapshotsAreUsableOnTheirNodeOnly(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	here := &csi.Topology{Segments: map[string]string{"zfs.csi.dev/node": testNode}}
	snapshot, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s",
		SourceVolumeId: volume.GetVolumeId(), AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{here}}})
	if err != nil {
		t.Fatal(err)
	}
	topology := snapshot.GetSnapshot().GetAccessibleTopology()
	if len(topology) != 1 || !proto.Equal(topology[0], here) {
		t.Errorf("accessible_topology %v, want %v", topology, here)
	}
	elsewhere := &csi.Topology{Segments: map[string]string{"zfs.csi.dev/node": "node-b"}}
	_, err = h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "t",
		SourceVolumeId: volume.GetVolumeId(), AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{elsewhere}}})
	if code(err) != codes.ResourceExhausted {
		t.Errorf("a snapshot required on another node: got %v, want RESOURCE_EXHAUSTED", err)
	}
}

func TestCreateSnapshotRetriedAfterAnInterruptedProgramConverges(t *testing.T) {
	// A signal to `zfs program` (the daemon killed, or its deadline) can
	// end the snapshot program between its snapshot and its properties.
	// Seen on ZFS 2.3: every retry then answered ALREADY_EXISTS.
	for _, h := range []*harness{newHarness(t), warmHarness(t)} {
		volume := h.create(createRequest("v", 1<<30, mountCapability("")))
		dataset := datasetOf(t, volume.GetVolumeId())
		leftover := dataset + "@" + h.server.namer.SnapshotComponent("s")
		// The run marked the volume before its snapshot, and was cut off
		// before the properties (and before it took the mark away).
		if err := h.fake.Set(context.Background(), dataset, map[string]string{h.server.props.Snapshotting: "s"}); err != nil {
			t.Fatal(err)
		}
		if err := h.fake.Snapshot(context.Background(), leftover, nil); err != nil {
			t.Fatal(err)
		}
		snapshot := h.snapshot("s", volume.GetVolumeId())
		if snapshot.GetSnapshotId() != "node-a:"+leftover {
			t.Errorf("got %s, want the leftover %s", snapshot.GetSnapshotId(), leftover)
		}
		row := h.dataset(leftover)
		if row.User[h.server.props.SnapshotName] != "s" || row.User[h.server.props.Size] != "1073741824" {
			t.Errorf("the leftover was not completed: %v", row.User)
		}
		if again := h.snapshot("s", volume.GetVolumeId()); again.GetSnapshotId() != snapshot.GetSnapshotId() {
			t.Errorf("a second retry: %s", again.GetSnapshotId())
		}
	}
	t.Run("a snapshot carrying another name, or an internal one, is still refused", func(t *testing.T) {
		h := warmHarness(t)
		volume := h.create(createRequest("v", 1<<30, mountCapability("")))
		leftover := datasetOf(t, volume.GetVolumeId()) + "@" + h.server.namer.SnapshotComponent("s")
		if err := h.fake.Snapshot(context.Background(), leftover, map[string]string{h.server.props.Internal: "true"}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: volume.GetVolumeId()}); code(err) != codes.AlreadyExists {
			t.Errorf("got %v, want ALREADY_EXISTS", err)
		}
	})
}

func TestASnapshotIsSizedAsItsVolumeWasWhenTaken(t *testing.T) {
	for _, capability := range []*csi.VolumeCapability{mountCapability(""), blockCapability()} {
		for _, h := range []*harness{newHarness(t), warmHarness(t)} {
			volume := h.create(createRequest("v", 1<<30, capability))
			snapshot := h.snapshot("s", volume.GetVolumeId())
			if _, err := h.server.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
				VolumeId: volume.GetVolumeId(), CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}}); err != nil {
				t.Fatal(err)
			}
			retried := h.snapshot("s", volume.GetVolumeId())
			listed, err := h.server.ListSnapshots(context.Background(), &csi.ListSnapshotsRequest{SnapshotId: snapshot.GetSnapshotId()})
			if err != nil || len(listed.GetEntries()) != 1 {
				t.Fatalf("list: %v, %v", listed, err)
			}
			for _, got := range []*csi.Snapshot{snapshot, retried, listed.GetEntries()[0].GetSnapshot()} {
				if got.GetSizeBytes() != 1<<30 {
					t.Errorf("%v: size_bytes %d, want the 1 GiB the volume had", capability, got.GetSizeBytes())
				}
			}
			// A restore at exactly size_bytes works (Kubernetes' restoreSize).
			restore := fromSnapshot(createRequest("restore", snapshot.GetSizeBytes(), capability), snapshot.GetSnapshotId())
			h.create(restore)
		}
	}
}

func TestZvolClonesKeepTheirSourcesBlockSize(t *testing.T) {
	for _, blockSize := range []string{"32K", "128K"} {
		h := newHarness(t)
		req := createRequest("src", 1<<30, blockCapability())
		req.Parameters = map[string]string{ParamVolBlockSize: blockSize}
		source := h.create(req)
		snapshot := h.snapshot("s", source.GetVolumeId())
		for name, clone := range map[string]*csi.CreateVolumeRequest{
			"from a snapshot": fromSnapshot(createRequest("from-snapshot", 1<<30+1, blockCapability()), snapshot.GetSnapshotId()),
			"from a volume":   fromVolume(createRequest("from-volume", 1<<30+1, blockCapability()), source.GetVolumeId()),
		} {
			volume, err := h.server.CreateVolume(context.Background(), clone)
			if err != nil {
				t.Fatalf("%s with %s blocks: %v", name, blockSize, err)
			}
			size, _ := zfs.ParseSize(blockSize)
			if got := uint64(volume.GetVolume().GetCapacityBytes()); got%size != 0 || got < 1<<30+1 {
				t.Errorf("%s with %s blocks: %d bytes", name, blockSize, got)
			}
		}
	}
}

func TestDeleteVolumeDestroysNothingWhenSomethingBlocksIt(t *testing.T) {
	for name, block := range map[string]func(h *harness, dataset string) error{
		"a child dataset made by hand": func(h *harness, dataset string) error {
			return h.fake.Create(context.Background(), dataset+"/child", zfs.CreateOptions{})
		},
		"a snapshot held by zfs hold": func(h *harness, dataset string) error {
			if err := h.fake.Snapshot(context.Background(), dataset+"@zrepl_1", nil); err != nil {
				return err
			}
			return h.fake.Hold(dataset + "@zrepl_1")
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			volume := h.create(createRequest("v", 1<<30, mountCapability("")))
			dataset := datasetOf(t, volume.GetVolumeId())
			if err := h.fake.Snapshot(context.Background(), dataset+"@manual", nil); err != nil {
				t.Fatal(err)
			}
			if err := block(h, dataset); err != nil {
				t.Fatal(err)
			}
			before := h.fake.Names()
			for range 2 {
				_, err := h.server.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: volume.GetVolumeId()})
				if code(err) != codes.FailedPrecondition {
					t.Fatalf("got %v, want FAILED_PRECONDITION", err)
				}
			}
			if after := h.fake.Names(); strings.Join(after, " ") != strings.Join(before, " ") {
				t.Errorf("something was destroyed:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

func TestTheReaperNeverDestroysWhatTheDriverDidNotMake(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	snapshot := h.snapshot("s", volume.GetVolumeId())
	h.deleteVolume(volume.GetVolumeId()) // held by its snapshot: marked deleted
	dataset := datasetOf(t, volume.GetVolumeId())
	if err := h.fake.Create(context.Background(), dataset+"/child", zfs.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.deleteSnapshot(snapshot.GetSnapshotId())
	if err := h.server.Reap(context.Background()); err == nil {
		t.Error("the pass reported no problem with a volume it cannot destroy")
	}
	if !h.fake.Exists(dataset+"/child") || !h.fake.Exists(dataset) {
		t.Errorf("destroyed: %v", h.fake.Names())
	}
}

// The names the spec does not allow (none, more than 128 bytes, not UTF-8)
// are refused the same way by every call that takes a name; names_test.go
// holds those it allows, tabs and "-" among them.
func TestNamesAreCheckedOnceForEveryPath(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	for _, name := range []string{"", strings.Repeat("x", 129), "\xff"} {
		if _, err := h.server.CreateVolume(context.Background(), createRequest(name, 1<<30, mountCapability(""))); code(err) != codes.InvalidArgument {
			t.Errorf("CreateVolume %q: got %v", name, err)
		}
		if _, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volume.GetVolumeId()}); code(err) != codes.InvalidArgument {
			t.Errorf("CreateSnapshot %q: got %v", name, err)
		}
	}
	t.Run("a name cannot take another's dataset", func(t *testing.T) {
		h := newHarness(t)
		first := h.create(createRequest("data base", 1<<30, mountCapability("")))
		squatter := strings.TrimPrefix(datasetOf(t, first.GetVolumeId()), "tank/csi/")
		second := h.create(createRequest(squatter, 1<<30, mountCapability("")))
		if first.GetVolumeId() == second.GetVolumeId() {
			t.Errorf("%q and %q are one volume", "data base", squatter)
		}
	})
}

func TestMutableParametersOverrideParameters(t *testing.T) {
	h := newHarness(t)
	req := createRequest("v", 1<<30, mountCapability(""))
	req.Parameters = map[string]string{"zfs.compression": "lz4"}
	req.MutableParameters = map[string]string{"zfs.compression": "zstd"}
	volume := h.create(req)
	if got := h.fake.Property(datasetOf(t, volume.GetVolumeId()), "compression"); got != "zstd" {
		t.Errorf("compression=%s, want the mutable parameter's zstd", got)
	}
}

func TestAMissingParentIsAPreconditionNotAMissingSource(t *testing.T) {
	h := newHarness(t)
	if err := h.fake.Destroy(context.Background(), "tank/csi", zfs.DestroyOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.server.CreateVolume(context.Background(), createRequest("v", 1<<30, mountCapability(""))); code(err) != codes.FailedPrecondition {
		t.Errorf("got %v, want FAILED_PRECONDITION", err)
	}
}

func TestValidateVolumeCapabilitiesConfirmsOnlyWhatItChecked(t *testing.T) {
	h := newHarness(t)
	req := createRequest("v", 1<<30, mountCapability(""))
	req.Parameters = map[string]string{"zfs.compression": "lz4"}
	volume := h.create(req)
	validate := func(parameters, volumeContext map[string]string) *csi.ValidateVolumeCapabilitiesResponse {
		response, err := h.server.ValidateVolumeCapabilities(context.Background(), &csi.ValidateVolumeCapabilitiesRequest{
			VolumeId: volume.GetVolumeId(), VolumeCapabilities: []*csi.VolumeCapability{mountCapability("")},
			Parameters: parameters, VolumeContext: volumeContext})
		if err != nil {
			t.Fatal(err)
		}
		return response
	}
	if validate(req.Parameters, volume.GetVolumeContext()).GetConfirmed() == nil {
		t.Error("the volume's own parameters and context were not confirmed")
	}
	for name, response := range map[string]*csi.ValidateVolumeCapabilitiesResponse{
		"other parameters":         validate(map[string]string{"zfs.compression": "zstd"}, nil),
		"invalid parameters":       validate(map[string]string{"bogus": "1"}, nil),
		"another volume's context": validate(nil, map[string]string{"kind": "zvol"}),
	} {
		if response.GetConfirmed() != nil || response.GetMessage() == "" {
			t.Errorf("%s: confirmed %v, message %q", name, response.GetConfirmed(), response.GetMessage())
		}
	}
}

// The shipped zfs-block StorageClass carries volblocksize, and Kubernetes
// sends a class's parameters with every claim of it, restores and clones
// included. A clone keeps its source's blocks (ZFS cannot change a zvol's
// volblocksize), so the parameter applies to new zvols only; refusing it
// (as the driver did until the two-node cluster's AcrossNodes scenario
// restored a zfs-block snapshot) made every restore of that class fail for
// good with INVALID_ARGUMENT.
func TestARestoreThroughAClassWithVolblocksizeKeepsItsSources(t *testing.T) {
	h := newHarness(t)
	req := createRequest("block-source", 64<<20, blockCapability())
	req.Parameters = map[string]string{ParamVolBlockSize: "8K"}
	source := h.create(req)
	snapshot := h.snapshot("block-snap", source.GetVolumeId())
	for name, from := range map[string]*csi.VolumeContentSource{
		"from its snapshot": {Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshot.GetSnapshotId()}}},
		"from the volume":   {Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: source.GetVolumeId()}}},
	} {
		t.Run(name, func(t *testing.T) {
			req := createRequest("block-"+strings.ReplaceAll(name, " ", "-"), 64<<20, blockCapability())
			req.Parameters = map[string]string{ParamVolBlockSize: "16K"} // the class's, not the source's
			req.VolumeContentSource = from
			volume := h.create(req)
			if got := h.dataset(datasetOf(t, volume.GetVolumeId())).VolBlockSize; got != 8<<10 {
				t.Errorf("the clone has volblocksize %d, want its source's 8 KiB", got)
			}
		})
	}
}
