package snapmeta

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

const (
	node = "node-1"
	kib  = 1 << 10
)

type harness struct {
	t      *testing.T
	fake   *zfstest.Fake
	props  rules.UserProps
	client csi.SnapshotMetadataClient
}

// newHarness serves the service on a socket, over a fake pool with a 1 MiB
// zvol (16 KiB blocks) and a dataset under tank/csi.
func newHarness(t *testing.T) *harness {
	cfg := rules.Config{DriverName: "zfs.csi.dev", NodeID: node, ParentDatasets: []string{"tank/csi"}}
	fake := zfstest.NewFake(map[string]uint64{"tank": 1 << 40})
	props := rules.NewUserProps(cfg.DriverName)
	ctx := context.Background()
	for _, step := range []error{
		fake.Create(ctx, "tank/csi", zfs.CreateOptions{}),
		fake.Create(ctx, "tank/csi/vol", zfs.CreateOptions{VolSize: 1 << 20, Properties: map[string]string{props.Managed: "true", "volblocksize": "16384"}}),
		fake.Create(ctx, "tank/csi/fs", zfs.CreateOptions{Properties: map[string]string{props.Managed: "true"}}),
		fake.Create(ctx, "tank/csi/other", zfs.CreateOptions{VolSize: 1 << 20, Properties: map[string]string{props.Managed: "true"}}),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	server := rpc.NewServer(zerolog.Nop(), rpc.Services{SnapshotMetadata: New(cfg, fake)})
	socket := filepath.Join(t.TempDir(), "csi.sock")
	if err := server.Listen("unix://" + socket); err != nil {
		t.Fatal(err)
	}
	go server.Serve()
	t.Cleanup(func() { server.Stop(context.Background()) })
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &harness{t: t, fake: fake, props: props, client: csi.NewSnapshotMetadataClient(conn)}
}

// snapshot takes a CSI snapshot of a dataset and returns its ID.
func (h *harness) snapshot(dataset, name string) string {
	h.t.Helper()
	if err := h.fake.Snapshot(context.Background(), dataset+"@"+name, map[string]string{h.props.SnapshotName: name}); err != nil {
		h.t.Fatal(err)
	}
	return rules.SnapshotID(node, dataset+"@"+name)
}

type extent struct{ offset, size int64 }

// drain reads a response stream: its extents, the number of responses, and
// the capacity each reported.
func drain[T interface {
	GetBlockMetadata() []*csi.BlockMetadata
	GetVolumeCapacityBytes() int64
	GetBlockMetadataType() csi.BlockMetadataType
}](t *testing.T, recv func() (T, error)) ([]extent, int, error) {
	var extents []extent
	responses := 0
	for {
		response, err := recv()
		if errors.Is(err, io.EOF) {
			return extents, responses, nil
		}
		if err != nil {
			return extents, responses, err
		}
		responses++
		if response.GetVolumeCapacityBytes() != 1<<20 || response.GetBlockMetadataType() != csi.BlockMetadataType_VARIABLE_LENGTH {
			t.Errorf("response %d: capacity %d, type %v", responses, response.GetVolumeCapacityBytes(), response.GetBlockMetadataType())
		}
		for _, block := range response.GetBlockMetadata() {
			extents = append(extents, extent{block.GetByteOffset(), block.GetSizeBytes()})
		}
	}
}

func (h *harness) allocated(id string, start int64, max int32) ([]extent, int, error) {
	stream, err := h.client.GetMetadataAllocated(context.Background(), &csi.GetMetadataAllocatedRequest{SnapshotId: id, StartingOffset: start, MaxResults: max})
	if err != nil {
		return nil, 0, err
	}
	return drain(h.t, stream.Recv)
}

func (h *harness) delta(base, target string, start int64, max int32) ([]extent, int, error) {
	stream, err := h.client.GetMetadataDelta(context.Background(), &csi.GetMetadataDeltaRequest{BaseSnapshotId: base, TargetSnapshotId: target,
		StartingOffset: start, MaxResults: max})
	if err != nil {
		return nil, 0, err
	}
	return drain(h.t, stream.Recv)
}

func (h *harness) write(offset, length uint64) {
	h.t.Helper()
	if err := h.fake.WriteBlocks("tank/csi/vol", offset, length); err != nil {
		h.t.Fatal(err)
	}
}

func TestAllocatedIsWhatWasWrittenMergedIntoExtents(t *testing.T) {
	h := newHarness(t)
	empty := h.snapshot("tank/csi/vol", "empty")
	h.write(0, 32*kib)
	h.write(64*kib, 10*kib) // one block of 16 KiB is written
	h.write(1<<20-16*kib, 16*kib)
	full := h.snapshot("tank/csi/vol", "full")
	want := []extent{{0, 32 * kib}, {64 * kib, 16 * kib}, {1<<20 - 16*kib, 16 * kib}}
	got, responses, err := h.allocated(full, 0, 0)
	if err != nil || !equal(got, want) || responses != 1 {
		t.Errorf("got %v in %d responses, %v; want %v in 1", got, responses, err, want)
	}
	if got, responses, err := h.allocated(full, 0, 1); err != nil || !equal(got, want) || responses != 3 {
		t.Errorf("max_results 1: got %v in %d responses, %v", got, responses, err)
	}
	if got, _, err := h.allocated(full, 70*kib, 0); err != nil || !equal(got, []extent{{70 * kib, 10 * kib}, {1<<20 - 16*kib, 16 * kib}}) {
		t.Errorf("from 70 KiB: got %v, %v", got, err)
	}
	if got, responses, err := h.allocated(empty, 0, 0); err != nil || len(got) != 0 || responses != 1 {
		t.Errorf("an empty zvol: got %v in %d responses, %v; want one empty response", got, responses, err)
	}
	if got, responses, err := h.allocated(full, 1<<20, 0); err != nil || len(got) != 0 || responses != 1 {
		t.Errorf("from the end: got %v in %d responses, %v", got, responses, err)
	}
}

func TestDeltaIsExactlyWhatWasWrittenAndFreedSinceTheBase(t *testing.T) {
	h := newHarness(t)
	h.write(0, 64*kib)
	h.write(512*kib, 16*kib)
	base := h.snapshot("tank/csi/vol", "base")
	h.write(96*kib, 16*kib)
	h.write(112*kib, 16*kib)
	for _, free := range [][2]uint64{{0, 16 * kib}, {512 * kib, 16 * kib}} {
		if err := h.fake.FreeBlocks("tank/csi/vol", free[0], free[1]); err != nil {
			t.Fatal(err)
		}
	}
	target := h.snapshot("tank/csi/vol", "target")
	// The stream frees more than changed: the never-written 64–96 KiB (holes
	// without a birth time) and everything past the target's last data
	// (128 KiB) to the end. Only where the base held data did a free change
	// anything: 0–16 KiB and 512–528 KiB.
	want := []extent{{0, 16 * kib}, {96 * kib, 32 * kib}, {512 * kib, 16 * kib}}
	got, responses, err := h.delta(base, target, 0, 0)
	if err != nil || !equal(got, want) || responses != 1 {
		t.Errorf("got %v in %d responses, %v; want %v in 1", got, responses, err, want)
	}
	if got, responses, err := h.delta(base, target, 0, 1); err != nil || !equal(got, want) || responses != 3 {
		t.Errorf("max_results 1: got %v in %d responses, %v", got, responses, err)
	}
	if got, _, err := h.delta(base, target, 100*kib, 0); err != nil || !equal(got, []extent{{100 * kib, 28 * kib}, {512 * kib, 16 * kib}}) {
		t.Errorf("from 100 KiB: got %v, %v", got, err)
	}
	// Nothing changed: the stream still frees past the data; nothing to report.
	again := h.snapshot("tank/csi/vol", "again")
	if got, responses, err := h.delta(target, again, 0, 0); err != nil || len(got) != 0 || responses != 1 {
		t.Errorf("no change: got %v in %d responses, %v; want one empty response", got, responses, err)
	}
}

func TestRefusals(t *testing.T) {
	h := newHarness(t)
	vol := h.snapshot("tank/csi/vol", "a")
	later := h.snapshot("tank/csi/vol", "b")
	fs := h.snapshot("tank/csi/fs", "s")
	other := h.snapshot("tank/csi/other", "s")
	if err := h.fake.Snapshot(context.Background(), "tank/csi/vol@by-hand", nil); err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"a filesystem volume's snapshot", func() error { _, _, err := h.allocated(fs, 0, 0); return err }, codes.FailedPrecondition},
		{"another node's snapshot", func() error { _, _, err := h.allocated("node-2:tank/csi/vol@a", 0, 0); return err }, codes.NotFound},
		{"a malformed ID", func() error { _, _, err := h.allocated("garbage", 0, 0); return err }, codes.NotFound},
		{"an operator's snapshot", func() error { _, _, err := h.allocated(node+":tank/csi/vol@by-hand", 0, 0); return err }, codes.NotFound},
		{"no ID", func() error { _, _, err := h.allocated("", 0, 0); return err }, codes.InvalidArgument},
		{"an offset past the end", func() error { _, _, err := h.allocated(vol, 1<<20+1, 0); return err }, codes.OutOfRange},
		{"a negative offset", func() error { _, _, err := h.allocated(vol, -1, 0); return err }, codes.OutOfRange},
		{"a negative max_results", func() error { _, _, err := h.allocated(vol, 0, -1); return err }, codes.InvalidArgument},
		{"a delta of two volumes", func() error { _, _, err := h.delta(vol, other, 0, 0); return err }, codes.InvalidArgument},
		{"a delta whose base is later", func() error { _, _, err := h.delta(later, vol, 0, 0); return err }, codes.InvalidArgument},
		{"a delta of a filesystem volume", func() error { _, _, err := h.delta(fs, fs, 0, 0); return err }, codes.FailedPrecondition},
	} {
		if err := test.call(); status.Code(err) != test.want {
			t.Errorf("%s: got %v, want %s", test.name, err, test.want)
		}
	}
}

func equal(a, b []extent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAFreeToTheEndIsTheLastExtentWhereverTheStreamSendsIt(t *testing.T) {
	var sent []extent
	out, err := newExtents(zvolSnapshot{volSize: 1 << 20}, 0, 0, func(blocks []*csi.BlockMetadata) error {
		for _, b := range blocks {
			sent = append(sent, extent{b.GetByteOffset(), b.GetSizeBytes()})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []zfs.StreamRange{{Offset: 512 * kib, Length: zfs.ToEnd, Freed: true}, {Offset: 0, Length: 16 * kib},
		{Offset: 480 * kib, Length: 32 * kib}} {
		if err := out.add(r.Offset, r.Length); err != nil {
			t.Fatal(err)
		}
	}
	if err := out.finish(nil); err != nil {
		t.Fatal(err)
	}
	if want := []extent{{0, 16 * kib}, {480 * kib, 1<<20 - 480*kib}}; !equal(sent, want) {
		t.Errorf("got %v, want %v", sent, want)
	}
}

// The base is read (a second zfs send) only when the delta frees something
// where something may be reported: a zvol written to its end and rewritten
// in place costs one send.
func TestADeltaReadsTheBaseOnlyForAFreeItMustReport(t *testing.T) {
	h := newHarness(t)
	h.write(0, 1<<20)
	base := h.snapshot("tank/csi/vol", "base")
	h.write(16*kib, 16*kib)
	rewritten := h.snapshot("tank/csi/vol", "rewritten")
	if err := h.fake.FreeBlocks("tank/csi/vol", 1<<20-16*kib, 16*kib); err != nil {
		t.Fatal(err)
	}
	freed := h.snapshot("tank/csi/vol", "freed")
	for _, test := range []struct {
		name         string
		base, target string
		want         []extent
		sends        int
	}{
		{"rewritten in place", base, rewritten, []extent{{16 * kib, 16 * kib}}, 1},
		{"the last block freed", rewritten, freed, []extent{{1<<20 - 16*kib, 16 * kib}}, 2},
	} {
		before := h.fake.Calls()["VolumeRanges"]
		got, _, err := h.delta(test.base, test.target, 0, 0)
		if err != nil || !equal(got, test.want) {
			t.Errorf("%s: got %v, %v; want %v", test.name, got, err, test.want)
		}
		if sends := h.fake.Calls()["VolumeRanges"] - before; sends != test.sends {
			t.Errorf("%s: %d sends, want %d", test.name, sends, test.sends)
		}
	}
}
