package controller

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

func TestCreateVolumeMakesWhatTheCapabilityAsksFor(t *testing.T) {
	tests := []struct {
		name       string
		capability *csi.VolumeCapability
		size       int64
		parameters map[string]string
		check      func(t *testing.T, h *harness, row zfs.Dataset, volume *csi.Volume)
	}{
		{
			name: "a mount request without fsType makes a thick dataset with a legacy mountpoint", capability: mountCapability(""), size: 5 << 20,
			check: func(t *testing.T, h *harness, row zfs.Dataset, volume *csi.Volume) {
				if row.Type != zfs.Filesystem || row.RefQuota != 5<<20 || row.RefReservation != 5<<20 {
					t.Errorf("got %s refquota=%d refreservation=%d, want a filesystem with both 5 MiB", row.Type, row.RefQuota, row.RefReservation)
				}
				if volume.GetVolumeContext()[rules.ContextKind] != rules.KindDataset {
					t.Errorf("volume context %v does not say dataset", volume.GetVolumeContext())
				}
			},
		},
		{
			name: "a block request makes a thick zvol rounded up to the volume block size", capability: blockCapability(), size: 5<<20 + 1,
			check: func(t *testing.T, h *harness, row zfs.Dataset, volume *csi.Volume) {
				want := uint64(5<<20 + 16<<10)
				if row.Type != zfs.Volume || row.VolSize != want || row.RefReservation != zfs.ThickReservation(want, 16<<10) || volume.GetCapacityBytes() != int64(want) {
					t.Errorf("got %s volsize=%d refreservation=%d capacity=%d, want a zvol of %d", row.Type, row.VolSize, row.RefReservation, volume.GetCapacityBytes(), want)
				}
			},
		},
		{
			name: "an ext4 mount request makes a zvol that remembers its filesystem", capability: mountCapability("ext4"), size: 64 << 20,
			check: func(t *testing.T, h *harness, row zfs.Dataset, volume *csi.Volume) {
				if row.Type != zfs.Volume || row.User[h.props.FSType] != "ext4" || volume.GetVolumeContext()[rules.ContextFSType] != "ext4" {
					t.Errorf("got %s with fstype property %q and context %v", row.Type, row.User[h.props.FSType], volume.GetVolumeContext())
				}
			},
		},
		{
			name: "thin makes a sparse zvol without a reservation", capability: blockCapability(), size: 64 << 20,
			parameters: map[string]string{ParamThin: "true", ParamVolBlockSize: "64K"},
			check: func(t *testing.T, h *harness, row zfs.Dataset, volume *csi.Volume) {
				if row.RefReservation != 0 || row.VolBlockSize != 64<<10 {
					t.Errorf("got refreservation=%d volblocksize=%d, want 0 and 64 KiB", row.RefReservation, row.VolBlockSize)
				}
			},
		},
		{
			name: "ZFS properties and CO metadata are set on the volume", capability: mountCapability("zfs"), size: 1 << 30,
			parameters: map[string]string{"zfs.compression": "lz4", "zfs.com.example:team": "storage",
				"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "db", "csi.storage.k8s.io/provisioner-secret-name": "s"},
			check: func(t *testing.T, h *harness, row zfs.Dataset, volume *csi.Volume) {
				row = h.datasetProps(row.Name, "compression", "com.example:team")
				if row.User["compression"] != "lz4" || row.User["com.example:team"] != "storage" ||
					row.User[h.props.PVCName] != "data" || row.User[h.props.PVCNamespace] != "db" {
					t.Errorf("properties: %v", row.User)
				}
			},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			h := newHarness(t)
			req := createRequest("pvc-1", test.size, test.capability)
			req.Parameters = test.parameters
			volume := h.create(req)
			if calls := h.fake.TotalCalls(); calls != 1 {
				t.Errorf("CreateVolume ran %d zfs commands, want 1: %v", calls, h.fake.Calls())
			}
			row := h.dataset(datasetOf(t, volume.GetVolumeId()))
			if row.User[h.props.Managed] != "true" || row.User[h.props.CSIName] != "pvc-1" {
				t.Errorf("driver properties missing: %v", row.User)
			}
			if topology := volume.GetAccessibleTopology(); len(topology) != 1 || topology[0].GetSegments()["zfs.csi.dev/node"] != testNode {
				t.Errorf("accessible topology %v does not name this node", topology)
			}
			test.check(t, h, row, volume)
		})
	}
}

// datasetProps reads native properties too, through the fake's inheritance.
func (h *harness) datasetProps(name string, properties ...string) zfs.Dataset {
	h.t.Helper()
	row, err := zfs.Get(context.Background(), h.fake, name, append(h.props.All(), properties...))
	if err != nil {
		h.t.Fatal(err)
	}
	return row
}

func TestCreateVolumeRefusesWhatItCannotHonour(t *testing.T) {
	multiNode := mountCapability("")
	multiNode.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	tests := []struct {
		name string
		req  *csi.CreateVolumeRequest
		want codes.Code
	}{
		{"a request without a name is invalid", createRequest("", 1<<30, mountCapability("")), codes.InvalidArgument},
		{"a request without capabilities is invalid", &csi.CreateVolumeRequest{Name: "v"}, codes.InvalidArgument},
		{"a multi-node access mode is refused: volumes are node-local", createRequest("v", 1<<30, multiNode), codes.InvalidArgument},
		{"an unknown filesystem type is refused", createRequest("v", 1<<30, mountCapability("ntfs")), codes.InvalidArgument},
		{"a dataset and a block device at once are refused", &csi.CreateVolumeRequest{Name: "v",
			VolumeCapabilities: []*csi.VolumeCapability{mountCapability(""), blockCapability()}}, codes.InvalidArgument},
		{"a limit below the minimum size is out of range", &csi.CreateVolumeRequest{Name: "v",
			CapacityRange: &csi.CapacityRange{LimitBytes: 1000}, VolumeCapabilities: []*csi.VolumeCapability{mountCapability("")}}, codes.OutOfRange},
		{"a required size above the limit is out of range", &csi.CreateVolumeRequest{Name: "v",
			CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30, LimitBytes: 1 << 30}, VolumeCapabilities: []*csi.VolumeCapability{mountCapability("")}}, codes.OutOfRange},
		{"a zvol limit that rounding to the block size exceeds is out of range", &csi.CreateVolumeRequest{Name: "v",
			CapacityRange: &csi.CapacityRange{RequiredBytes: 4<<20 + 1, LimitBytes: 4<<20 + 1000}, VolumeCapabilities: []*csi.VolumeCapability{blockCapability()}}, codes.OutOfRange},
		{"a volume larger than the pool is resource exhausted", createRequest("v", 2<<40, mountCapability("")), codes.ResourceExhausted},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			h := newHarness(t)
			before := h.fake.Names()
			_, err := h.server.CreateVolume(context.Background(), test.req)
			if code(err) != test.want {
				t.Fatalf("got %v, want %s", err, test.want)
			}
			if after := h.fake.Names(); strings.Join(after, ",") != strings.Join(before, ",") {
				t.Errorf("datasets changed from %v to %v", before, after)
			}
		})
	}
}

func TestCreateVolumeValidatesParameters(t *testing.T) {
	tests := []struct {
		name       string
		capability *csi.VolumeCapability
		parameters map[string]string
		mutable    map[string]string
	}{
		{"mountpoint belongs to the driver", mountCapability(""), map[string]string{"zfs.mountpoint": "/srv"}, nil},
		{"refquota is the capacity, not a parameter", mountCapability(""), map[string]string{"zfs.refquota": "1G"}, nil},
		{"volsize is the capacity, not a parameter", blockCapability(), map[string]string{"zfs.volsize": "1G"}, nil},
		{"the driver's own user properties cannot be set", mountCapability(""), map[string]string{"zfs.zfs.csi.dev:managed": "false"}, nil},
		{"a user property must be lower case", mountCapability(""), map[string]string{"zfs.Com.Example:x": "1"}, nil},
		{"an unknown native property is refused", mountCapability(""), map[string]string{"zfs.frobnicate": "on"}, nil},
		{"recordsize does not apply to zvols", blockCapability(), map[string]string{"zfs.recordsize": "128K"}, nil},
		{"volmode does not apply to datasets", mountCapability(""), map[string]string{"zfs.volmode": "dev"}, nil},
		{"volblocksize does not apply to datasets", mountCapability(""), map[string]string{ParamVolBlockSize: "16K"}, nil},
		{"volblocksize must be a power of two", blockCapability(), map[string]string{ParamVolBlockSize: "12K"}, nil},
		{"thin must be a boolean", mountCapability(""), map[string]string{ParamThin: "maybe"}, nil},
		{"a parent dataset that is not allowed is refused", mountCapability(""), map[string]string{ParamParentDataset: "tank/other"}, nil},
		{"an unknown parameter is refused", mountCapability(""), map[string]string{"compression": "lz4"}, nil},
		{"a value with a tab would break zfs list and is refused", mountCapability(""), map[string]string{"zfs.com.example:x": "a\tb"}, nil},
		{"a create-only property cannot be mutable", mountCapability(""), nil, map[string]string{"zfs.casesensitivity": "mixed"}},
		{"a mutable parameter must be a ZFS property", mountCapability(""), nil, map[string]string{"XXX_FakeKey": "x"}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			h := newHarness(t)
			req := createRequest("v", 1<<30, test.capability)
			req.Parameters, req.MutableParameters = test.parameters, test.mutable
			_, err := h.server.CreateVolume(context.Background(), req)
			if code(err) != codes.InvalidArgument {
				t.Fatalf("got %v, want InvalidArgument", err)
			}
			if h.fake.TotalCalls() != 0 {
				t.Errorf("ran zfs commands for an invalid request: %v", h.fake.Calls())
			}
		})
	}
}

func TestCreateVolumeIsIdempotent(t *testing.T) {
	t.Run("the same request twice returns the same volume with one more command", func(t *testing.T) {
		h := newHarness(t)
		req := createRequest("pvc-1", 1<<30, mountCapability(""))
		first := h.create(req)
		h.fake.ResetCalls()
		second := h.create(req)
		if first.GetVolumeId() != second.GetVolumeId() || second.GetCapacityBytes() != 1<<30 {
			t.Errorf("got %v then %v", first, second)
		}
		if calls := h.fake.TotalCalls(); calls != 2 {
			t.Errorf("repeat ran %d commands, want 2 (create, then inspect)", calls)
		}
	})
	t.Run("a retried request with sourceMode=copy and no content source gets its volume", func(t *testing.T) {
		h := newHarness(t)
		req := createRequest("pvc-1", 1<<30, mountCapability(""))
		req.Parameters = map[string]string{ParamSourceMode: "copy"}
		first := h.create(req)
		if second := h.create(req); second.GetVolumeId() != first.GetVolumeId() {
			t.Errorf("got %v then %v", first, second)
		}
	})
	incompatible := []struct {
		name   string
		change func(req *csi.CreateVolumeRequest)
	}{
		{"a larger size", func(req *csi.CreateVolumeRequest) { req.CapacityRange.RequiredBytes = 2 << 30 }},
		{"block access", func(req *csi.CreateVolumeRequest) {
			req.VolumeCapabilities = []*csi.VolumeCapability{blockCapability()}
		}},
		{"other parameters", func(req *csi.CreateVolumeRequest) { req.Parameters = map[string]string{"zfs.compression": "zstd"} }},
		{"a content source", func(req *csi.CreateVolumeRequest) {
			req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
				Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: testNode + ":tank/csi/pvc-src"}}}
		}},
	}
	for _, test := range incompatible {
		t.Run("the same name with "+test.name+" already exists", func(t *testing.T) {
			h := newHarness(t)
			h.create(createRequest("pvc-src", 1<<30, mountCapability("")))
			h.create(createRequest("pvc-1", 1<<30, mountCapability("")))
			req := createRequest("pvc-1", 1<<30, mountCapability(""))
			test.change(req)
			if _, err := h.server.CreateVolume(context.Background(), req); code(err) != codes.AlreadyExists {
				t.Fatalf("got %v, want AlreadyExists", err)
			}
		})
	}
	t.Run("a dataset of the operator's with the volume's dataset name is never touched", func(t *testing.T) {
		h := newHarness(t)
		if _, err := h.server.CreateVolume(context.Background(), createRequest("keep", 1<<30, mountCapability(""))); code(err) != codes.AlreadyExists {
			t.Fatalf("got %v, want AlreadyExists", err)
		}
		if row := h.dataset("tank/csi/keep"); row.RefQuota != 0 || len(row.User) != 0 {
			t.Errorf("operator's dataset changed: %+v", row)
		}
	})
	t.Run("a name already used under another allowed parent already exists", func(t *testing.T) {
		h := newHarness(t, "tank/csi", "tank/other")
		h.create(createRequest("pvc-1", 1<<30, mountCapability("")))
		req := createRequest("pvc-1", 1<<30, mountCapability(""))
		req.Parameters = map[string]string{ParamParentDataset: "tank/other"}
		if _, err := h.server.CreateVolume(context.Background(), req); code(err) != codes.AlreadyExists {
			t.Fatalf("got %v, want AlreadyExists", err)
		}
	})
}

func TestCreateVolumeHonoursTopologyAndLocks(t *testing.T) {
	t.Run("a requisite topology without this node creates nothing here", func(t *testing.T) {
		h := newHarness(t)
		req := createRequest("pvc-1", 1<<30, mountCapability(""))
		req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{"zfs.csi.dev/node": "node-b"}}}}
		if _, err := h.server.CreateVolume(context.Background(), req); code(err) != codes.ResourceExhausted {
			t.Fatalf("got %v, want ResourceExhausted", err)
		}
		if h.fake.TotalCalls() != 0 {
			t.Errorf("ran %v", h.fake.Calls())
		}
	})
	t.Run("a requisite topology with this node among others is served", func(t *testing.T) {
		h := newHarness(t)
		req := createRequest("pvc-1", 1<<30, mountCapability(""))
		req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{
			{Segments: map[string]string{"zfs.csi.dev/node": "node-b"}}, {Segments: map[string]string{"zfs.csi.dev/node": testNode}}}}
		h.create(req)
	})
	t.Run("a call while another on the same name is under way is aborted", func(t *testing.T) {
		h := newHarness(t)
		release, err := h.server.inflight.Acquire("volume-name/pvc-1")
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		if _, err := h.server.CreateVolume(context.Background(), createRequest("pvc-1", 1<<30, mountCapability(""))); code(err) != codes.Aborted {
			t.Fatalf("got %v, want Aborted", err)
		}
	})
	t.Run("an expired deadline stops the call with DEADLINE_EXCEEDED", func(t *testing.T) {
		h := newHarness(t)
		ctx, cancel := context.WithTimeout(context.Background(), 0)
		defer cancel()
		if _, err := h.server.CreateVolume(ctx, createRequest("pvc-1", 1<<30, mountCapability(""))); code(err) != codes.DeadlineExceeded {
			t.Fatalf("got %v, want DeadlineExceeded", err)
		}
	})
}

func TestAnyValidNameMapsToADatasetUnderTheParent(t *testing.T) {
	names := []string{
		"pvc-0b7c4f4e-9a4e-4b8e-8d6f-2a1c3e5d7f90",
		strings.Repeat("x", 128),
		"ボリューム-データ",
		"has space/and slash@and:colon",
		strings.Repeat("é", 64),
		".",
		"..",
		"-leading-dash",
	}
	h := newHarness(t)
	for _, name := range names {
		volume := h.create(createRequest(name, 1<<20, mountCapability("")))
		id := volume.GetVolumeId()
		dataset := datasetOf(t, id)
		if len(id) > rules.MaxIDLength || !strings.HasPrefix(dataset, "tank/csi/") || strings.Count(dataset, "/") != 2 {
			t.Errorf("name %q became ID %q (%d bytes)", name, id, len(id))
		}
		if got := h.dataset(dataset).User[h.props.CSIName]; got != name || !utf8.ValidString(got) {
			t.Errorf("name %q is kept as %q", name, got)
		}
		snapshot := h.snapshot(name, id)
		if len(snapshot.GetSnapshotId()) > rules.MaxIDLength {
			t.Errorf("snapshot ID %q is %d bytes", snapshot.GetSnapshotId(), len(snapshot.GetSnapshotId()))
		}
	}
	if got := len(h.listVolumeIDs()); got != len(names) {
		t.Errorf("%d names made %d volumes", len(names), got)
	}
}

func TestFormattedZvolsFitTheirFilesystem(t *testing.T) {
	t.Run("a small xfs volume is rounded up to what mkfs.xfs accepts", func(t *testing.T) {
		h := newHarness(t)
		if got := h.create(createRequest("x", 64<<20, mountCapability("xfs"))).GetCapacityBytes(); got != 300<<20 {
			t.Errorf("capacity %d, want 300 MiB", got)
		}
	})
	t.Run("an xfs volume whose limit is below that is out of range", func(t *testing.T) {
		h := newHarness(t)
		req := createRequest("x", 64<<20, mountCapability("xfs"))
		req.CapacityRange.LimitBytes = 64 << 20
		if _, err := h.server.CreateVolume(context.Background(), req); code(err) != codes.OutOfRange {
			t.Errorf("got %v", err)
		}
	})
	t.Run("a raw zvol cannot become an ext4 volume, but an ext4 zvol can become a raw one", func(t *testing.T) {
		h := newHarness(t)
		raw := h.create(createRequest("raw", 64<<20, blockCapability()))
		rawSnapshot := h.snapshot("raw-snap", raw.GetVolumeId())
		if _, err := h.server.CreateVolume(context.Background(), fromSnapshot(createRequest("a", 64<<20, mountCapability("ext4")), rawSnapshot.GetSnapshotId())); code(err) != codes.InvalidArgument {
			t.Errorf("raw → ext4: %v", err)
		}
		formatted := h.create(createRequest("ext4", 64<<20, mountCapability("ext4")))
		if _, err := h.server.CreateVolume(context.Background(), fromVolume(createRequest("b", 64<<20, mountCapability("xfs")), formatted.GetVolumeId())); code(err) != codes.InvalidArgument {
			t.Errorf("ext4 → xfs: %v", err)
		}
		h.create(fromVolume(createRequest("c", 64<<20, blockCapability()), formatted.GetVolumeId()))
		h.create(fromVolume(createRequest("d", 64<<20, mountCapability("ext4")), formatted.GetVolumeId()))
	})
}
