package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// copyRequest asks for a zvol of size copied from a volume.
func copyRequest(name string, size int64, sourceID string) *csi.CreateVolumeRequest {
	req := fromVolume(createRequest(name, size, blockCapability()), sourceID)
	req.Parameters = map[string]string{ParamSourceMode: "copy"}
	return req
}

// snapshotsLeft are the snapshots the fake holds.
func (h *harness) snapshotsLeft() []string {
	var names []string
	for _, name := range h.fake.Names() {
		if strings.Contains(name, "@") {
			names = append(names, name)
		}
	}
	return names
}

func shortCall(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

func TestACopyLongerThanItsCallGoesOnAndARetryGetsTheVolume(t *testing.T) {
	h := newHarness(t)
	source := h.create(createRequest("src", 1<<30, blockCapability()))
	if err := h.fake.Write(datasetOf(t, source.GetVolumeId()), 64<<20); err != nil {
		t.Fatal(err)
	}
	release := h.fake.Stall("Copy")
	defer release()
	req := copyRequest("copy", 2<<30, source.GetVolumeId())

	_, err := h.server.CreateVolume(shortCall(t), req)
	if code(err) != codes.Aborted || !strings.Contains(err.Error(), "32M of its stream received") {
		t.Fatalf("a call whose deadline comes before its copy ends: %v, want ABORTED with the copy's progress", err)
	}
	_, err = h.server.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: source.GetVolumeId()})
	if code(err) != codes.Aborted {
		t.Errorf("DeleteVolume of the source during its copy: %v, want ABORTED (the copy holds its lock)", err)
	}
	if _, err := h.server.CreateVolume(shortCall(t), req); code(err) != codes.Aborted {
		t.Errorf("a retry during the copy: %v, want ABORTED", err)
	}
	if calls := h.fake.Calls()["Copy"]; calls != 0 {
		t.Errorf("%d copies ended while one was stalled: a retry started another", calls)
	}

	release()
	volume := h.create(req)
	if calls := h.fake.Calls()["Copy"]; calls != 1 {
		t.Errorf("the copy ran %d times, want once", calls)
	}
	row := h.dataset(datasetOf(t, volume.GetVolumeId()))
	if row.VolSize != 2<<30 || row.Origin != "" || row.Referenced != 64<<20 {
		t.Errorf("copy %+v, want 2 GiB, no origin, the source's 64 MiB", row)
	}
	if left := h.snapshotsLeft(); len(left) > 0 {
		t.Errorf("snapshots left behind: %v", left)
	}
	h.deleteVolume(source.GetVolumeId())
}

func TestACopyFinishesWithinItsCallWhenItCan(t *testing.T) {
	h := newHarness(t)
	source := h.create(createRequest("src", 1<<30, blockCapability()))
	h.fake.ResetCalls()
	volume := h.create(copyRequest("copy", 2<<30, source.GetVolumeId()))
	if volume.GetCapacityBytes() != 2<<30 {
		t.Errorf("capacity %d", volume.GetCapacityBytes())
	}
	// list the source, look for an earlier copy, snapshot, send|receive,
	// set volsize and reservation, destroy the received and the internal
	// snapshot.
	if calls := h.fake.TotalCalls(); calls != 7 {
		t.Errorf("a copy ran %d commands (%v), want 7", calls, h.fake.Calls())
	}
	// A retry after the copy: the source and the copy are read, nothing is sent.
	h.fake.ResetCalls()
	h.create(copyRequest("copy", 2<<30, source.GetVolumeId()))
	if calls := h.fake.Calls(); calls["Copy"] != 0 || calls["Snapshot"] != 0 || h.fake.TotalCalls() != 3 {
		t.Errorf("a retry after the copy ran %v, want three zfs list and no send", calls)
	}
	if _, err := h.server.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: source.GetVolumeId()}); err != nil {
		t.Errorf("the copy's locks outlived it: %v", err)
	}
}

func TestACopyInterruptedAfterItsReceiveIsFinishedByTheRetry(t *testing.T) {
	for _, step := range []string{"Set", "Destroy"} {
		t.Run("cut off at "+step, func(t *testing.T) {
			h := newHarness(t)
			source := h.create(createRequest("src", 1<<30, blockCapability()))
			req := copyRequest("copy", 2<<30, source.GetVolumeId())
			h.fake.FailNext(step, context.Canceled) // as a kill of the daemon would
			if _, err := h.server.CreateVolume(t.Context(), req); err == nil {
				t.Fatal("CreateVolume succeeded through a failed step")
			}
			volume := h.create(req)
			row := h.dataset(datasetOf(t, volume.GetVolumeId()))
			if row.VolSize != 2<<30 || h.fake.Property(row.Name, "refreservation") != "auto" {
				t.Errorf("the retry answered %+v (refreservation %q), want the 2 GiB thick zvol asked for",
					row, h.fake.Property(row.Name, "refreservation"))
			}
			if left := h.snapshotsLeft(); len(left) > 0 {
				t.Errorf("snapshots left behind: %v", left)
			}
			if _, err := h.server.CreateVolume(t.Context(), copyRequest("copy", 3<<30, source.GetVolumeId())); code(err) != codes.AlreadyExists {
				t.Errorf("a finished copy asked for with a larger size: %v, want ALREADY_EXISTS", err)
			}
		})
	}
}

func TestACopyThatCannotGrowIsTakenBack(t *testing.T) {
	h := newHarness(t)
	source := h.create(createRequest("src", 1<<30, blockCapability()))
	h.fake.FailNext("Set", &zfs.CommandError{Stderr: "out of space", Kind: zfs.ErrNoSpace})
	_, err := h.server.CreateVolume(t.Context(), copyRequest("copy", 2<<30, source.GetVolumeId()))
	if code(err) != codes.ResourceExhausted {
		t.Errorf("err = %v, want RESOURCE_EXHAUSTED", err)
	}
	if names := h.fake.Names(); len(names) != 5 || len(h.snapshotsLeft()) > 0 {
		t.Errorf("left behind: %v", names)
	}
	if !errors.Is(err, zfs.ErrNoSpace) {
		t.Errorf("err = %v, want the zfs error", err)
	}
}

func TestCloseStopsACopyAndLeavesNothing(t *testing.T) {
	h := newHarness(t)
	source := h.create(createRequest("src", 1<<30, blockCapability()))
	release := h.fake.Stall("Copy")
	defer release()
	if _, err := h.server.CreateVolume(shortCall(t), copyRequest("copy", 1<<30, source.GetVolumeId())); code(err) != codes.Aborted {
		t.Fatalf("err = %v, want ABORTED", err)
	}
	h.server.Close()
	if names := h.fake.Names(); len(names) != 5 {
		t.Errorf("a copy stopped by Close left %v", names)
	}
	if _, err := h.server.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: source.GetVolumeId()}); err != nil {
		t.Errorf("the stopped copy kept its source's lock: %v", err)
	}
}
