package rpc

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// failingController answers every ControllerGetVolume with a typed zfs
// error and panics in ListVolumes.
type failingController struct {
	csi.UnimplementedControllerServer
}

func (failingController) ControllerGetVolume(context.Context, *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	return nil, fmt.Errorf("reading it: %w", zfs.ErrNotFound)
}

func (failingController) ListVolumes(context.Context, *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	panic("boom")
}

func TestExtraInterceptorsSeeTheFinalCodeOfEveryCall(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]codes.Code{}
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		mu.Lock()
		defer mu.Unlock()
		seen[info.FullMethod] = status.Code(err)
		return resp, err
	}
	client := csi.NewControllerClient(serve(t, NewServer(zerolog.Nop(), Services{Controller: failingController{}}, record)))
	client.ControllerGetVolume(t.Context(), &csi.ControllerGetVolumeRequest{VolumeId: "n:tank/v"})
	client.ListVolumes(t.Context(), &csi.ListVolumesRequest{})

	tests := []struct {
		name   string
		method string
		want   codes.Code
	}{
		{"a typed zfs error reaches the extra interceptor already mapped", "/csi.v1.Controller/ControllerGetVolume", codes.NotFound},
		{"a panic reaches the extra interceptor as INTERNAL", "/csi.v1.Controller/ListVolumes", codes.Internal},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			mu.Lock()
			defer mu.Unlock()
			if got, ok := seen[test.method]; !ok || got != test.want {
				t.Errorf("code seen = %v (recorded: %t), want %v", got, ok, test.want)
			}
		})
	}
}

// serve serves server on a socket of the test's and returns a client
// connection to it; both go when the test ends.
func serve(t *testing.T, server *Server) *grpc.ClientConn {
	t.Helper()
	endpoint := "unix://" + filepath.Join(t.TempDir(), "csi.sock")
	if err := server.Listen(endpoint); err != nil {
		t.Fatal(err)
	}
	go server.Serve()
	t.Cleanup(func() { server.Stop(context.Background()) })
	// Requests as large as a test sends (the default limit is 4 MiB).
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
