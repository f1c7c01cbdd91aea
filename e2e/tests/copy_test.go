//go:build e2e

package tests

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// copySource makes a block zvol holding mib MiB of random data and returns
// it with the data's checksum.
func copySource(t *testing.T, d *driverProcess, name string, mib int) (*csi.Volume, string) {
	t.Helper()
	source := d.createVolume(volumeRequest(name, int64(mib)<<20, blockCap(), nil))
	device := "/dev/zvol/" + datasetOf(t, source.GetVolumeId())
	eventually(t, 30*time.Second, func() string {
		if _, err := runErr("test", "-b", device); err != nil {
			return device + " did not appear"
		}
		return ""
	})
	mustRun(t, "dd", "if=/dev/urandom", "of="+device, "bs=1M", "count="+strconv.Itoa(mib), "oflag=direct", "status=none")
	return source, checksum(t, device, mib)
}

func checksum(t *testing.T, device string, mib int) string {
	t.Helper()
	out := mustRun(t, "sh", "-c", "head -c "+strconv.Itoa(mib<<20)+" "+device+" | sha256sum")
	return strings.Fields(out)[0]
}

func copyOf(name string, size int64, sourceID string) *csi.CreateVolumeRequest {
	req := volumeRequest(name, size, blockCap(), map[string]string{"sourceMode": "copy"})
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: sourceID}}}
	return req
}

// checkCopy: the copy holds the source's data, has the size asked for, is
// thick, and nothing of the transfer is left (no snapshot anywhere).
func checkCopy(t *testing.T, parent string, copied *csi.Volume, size int64, mib int, want string) {
	t.Helper()
	dataset := datasetOf(t, copied.GetVolumeId())
	if got := zfsGet(t, "volsize", dataset); got != strconv.FormatInt(size, 10) {
		t.Errorf("copy volsize %s, want %d", got, size)
	}
	if got := zfsGet(t, "refreservation", dataset); got == "0" {
		t.Error("the copy is not thick")
	}
	if got := zfsGet(t, "origin", dataset); got != "-" {
		t.Errorf("the copy has origin %s", got)
	}
	device := "/dev/zvol/" + dataset
	eventually(t, 30*time.Second, func() string {
		if _, err := runErr("test", "-b", device); err != nil {
			return device + " did not appear"
		}
		return ""
	})
	if got := checksum(t, device, mib); got != want {
		t.Errorf("the copy's data differs from its source's (%s, want %s)", got, want)
	}
	eventually(t, 30*time.Second, func() string {
		if left := strings.TrimSpace(run(t, "zfs", "list", "-H", "-r", "-t", "snapshot", "-o", "name", parent)); left != "" {
			return "snapshots left behind: " + left
		}
		return ""
	})
}

// A copy longer than the call that asked for it goes on; the call answers
// ABORTED with its progress, the retries wait for it, and one of them gets
// the volume. On TCG a 384 MiB send|receive takes about 20 s: far longer
// than the 3 s calls here.
func TestACopyOutlastsItsCallsAndCompletes(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	const mib = 384
	source, want := copySource(t, d, "copy-src", mib)
	req := copyOf("copy-long", 512<<20, source.GetVolumeId())
	aborted, progress := 0, ""
	deadline := time.Now().Add(5 * time.Minute)
	var copied *csi.Volume
	for copied == nil {
		call, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		response, err := d.controller.CreateVolume(call, req)
		cancel()
		switch status.Code(err) {
		case codes.OK:
			copied = response.GetVolume()
		case codes.Aborted:
			// A retry that arrives while the call before it still holds
			// the name's lock is told so; the others carry the progress.
			aborted++
			if message := status.Convert(err).Message(); strings.Contains(message, "received") {
				progress = message
			}
		case codes.DeadlineExceeded: // cut off before the copy began
		default:
			t.Fatalf("CreateVolume: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the copy did not complete within 5 min (%d ABORTED answers, last: %s)", aborted, progress)
		}
	}
	t.Logf("%d ABORTED answers before the volume; the last with progress: %s", aborted, progress)
	if aborted == 0 || progress == "" {
		t.Errorf("no ABORTED answer told the copy's progress (%d ABORTED): the copy finished within one 3 s call, and the test shows nothing; make the source larger", aborted)
	}
	if n := strings.Count(run(t, "cat", d.logPath), `"zfs","send"`); n != 1 {
		t.Errorf("zfs send ran %d times, want once: a retry started the copy again", n)
	}
	checkCopy(t, parent, copied, 512<<20, mib, want)
}

// A kill of the daemon (and its zfs commands) during a copy leaves nothing
// that stops the retry: zfs discards the receive cut short and the retry
// copies again; one cut after the receive is finished by the retry.
func TestACopyInterruptedByAKillConverges(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	const mib = 64
	source, want := copySource(t, d, "copy-kill-src", mib)
	for round, limit := range []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond, 4 * time.Second} {
		req := copyOf("copy-kill-"+strconv.Itoa(round), 128<<20, source.GetVolumeId())
		response, err := interruptedCall(t, d, limit, func(c context.Context) (*csi.CreateVolumeResponse, error) {
			return d.controller.CreateVolume(c, req)
		})
		if err != nil {
			t.Fatalf("round %d: CreateVolume after a kill: %v", round, err)
		}
		checkCopy(t, parent, response.GetVolume(), 128<<20, mib, want)
		if _, err := d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: response.GetVolume().GetVolumeId()}); err != nil {
			t.Fatal(err)
		}
	}
}
