package rpc

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
)

// echoingController answers with messages that repeat the caller's strings
// uncut, as a handler that forgot Bounded would.
type echoingController struct {
	csi.UnimplementedControllerServer
}

func (echoingController) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	return nil, status.Errorf(codes.InvalidArgument, "volume %q is refused", req.GetName())
}

func (echoingController) ControllerGetVolume(_ context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	panic("volume " + req.GetVolumeId())
}

func TestCallersStringsAreBoundedInLogLinesAndErrors(t *testing.T) {
	// Warn and above: the calls fail, and "serving CSI" stays out of the buffer.
	var logged bytes.Buffer
	client := csi.NewControllerClient(serve(t, NewServer(zerolog.New(&logged).Level(zerolog.WarnLevel), Services{Controller: echoingController{}})))
	huge := strings.Repeat("x", 1<<20)

	tests := []struct {
		name string
		call func() error
	}{
		{"a 1 MiB volume name echoed in an error", func() error {
			_, err := client.CreateVolume(t.Context(), &csi.CreateVolumeRequest{Name: huge})
			return err
		}},
		{"a 1 MiB volume ID in a panic", func() error {
			_, err := client.ControllerGetVolume(t.Context(), &csi.ControllerGetVolumeRequest{VolumeId: huge})
			return err
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			logged.Reset()
			err := test.call()
			if status.Code(err) == codes.OK || status.Code(err) == codes.ResourceExhausted {
				t.Fatalf("got %v, want the handler's error", status.Code(err))
			}
			if message := status.Convert(err).Message(); len(message) > MaxMessageBytes+32 {
				t.Errorf("the error message has %d bytes, more than %d", len(message), MaxMessageBytes+32)
			}
			// One line per call: the request's name or ID (cut to
			// MaxEchoedBytes) and the error (cut to MaxMessageBytes).
			line := logged.String()
			if len(line) > MaxMessageBytes+2*rules.MaxEchoedBytes+512 || strings.Count(line, "\n") != 1 {
				t.Errorf("the log line has %d bytes (%d lines), want one line within the bound", len(line), strings.Count(line, "\n"))
			}
			if !strings.Contains(line, "…(1048576 bytes)") {
				t.Errorf("the log line does not say how long the cut string was: %.300s", line)
			}
		})
	}
}
