//go:build e2e

package tests

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// sanityFSTypeEnv tells the test binary, run again by
// TestNodeSanityOnFormattedZvols, which filesystem its csi-sanity run is for.
const sanityFSTypeEnv = "ZFS_CSI_E2E_SANITY_FSTYPE"

// TestNodeSanityOnFormattedZvols runs csi-sanity with mount access on ext4
// and on xfs zvols. csi-sanity v5.6.0 has no flag for the fsType of its mount
// capabilities (it always leaves it empty, which this driver serves with a
// ZFS dataset), so each run goes through a proxy that writes the fsType into
// every mount capability. Only the Node specs run: the Controller specs
// make the same zvols in the block-access run of the guest script, and
// each formatted volume costs a mkfs under emulation. Ginkgo runs one
// suite per process: each run is this test binary again, running
// TestNodeSanityChild.
func TestNodeSanityOnFormattedZvols(t *testing.T) {
	for _, fsType := range []string{"ext4", "xfs"} {
		t.Run(fsType, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestNodeSanityChild$", "-test.v", "-test.timeout=40m",
				"-ginkgo.no-color", "-ginkgo.focus=Node Service")
			cmd.Env = append(os.Environ(), sanityFSTypeEnv+"="+fsType)
			out, err := cmd.CombinedOutput()
			summary := regexp.MustCompile(`(?m)^Ran \d+ of \d+ Specs.*$|\d+ Passed \| \d+ Failed \| \d+ Pending \| \d+ Skipped`).FindAllString(string(out), -1)
			t.Logf("csi-sanity, mount access on %s zvols: %s", fsType, strings.Join(summary, ": "))
			if err != nil {
				t.Errorf("csi-sanity on %s failed (%v):\n%s", fsType, err, lastLines(string(out), 300))
			}
		})
	}
}

// TestNodeSanityChild is one csi-sanity run for TestNodeSanityOnFormattedZvols.
func TestNodeSanityChild(t *testing.T) {
	fsType := os.Getenv(sanityFSTypeEnv)
	if fsType == "" {
		t.Skip("run by TestNodeSanityOnFormattedZvols")
	}
	d := startDriver(t, testParent(t))
	dir := t.TempDir()
	config := sanity.NewTestConfig()
	config.Address = startFSTypeProxy(t, d.socket, fsType)
	config.TestVolumeSize = sizeFor(fsType)
	config.TestVolumeExpandSize = 2 * sizeFor(fsType)
	config.TestVolumeMutableParameters = map[string]string{"zfs.compression": "lz4"}
	config.TargetPath, config.StagingPath = filepath.Join(dir, "mount"), filepath.Join(dir, "staging")
	sanity.Test(t, config)
}

// startFSTypeProxy serves a socket that forwards every CSI call to the
// driver, with fsType written into each mount capability that has none.
func startFSTypeProxy(t *testing.T, driverSocket, fsType string) string {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+driverSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "proxy.sock")
	listener, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		input, output, err := methodTypes(method)
		if err != nil {
			return err
		}
		request := input.New().Interface()
		if err := stream.RecvMsg(request); err != nil {
			return err
		}
		setFSType(request.ProtoReflect(), fsType)
		response := output.New().Interface()
		if err := conn.Invoke(stream.Context(), method, request, response); err != nil {
			return err
		}
		return stream.SendMsg(response)
	}))
	go server.Serve(listener)
	t.Cleanup(func() {
		server.Stop()
		conn.Close()
	})
	return socket
}

// methodTypes finds the request and response types of "/csi.v1.Node/NodeStageVolume".
func methodTypes(method string) (input, output protoreflect.MessageType, err error) {
	serviceName, methodName, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	descriptor, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(serviceName))
	if err != nil {
		return nil, nil, err
	}
	service, ok := descriptor.(protoreflect.ServiceDescriptor)
	if !ok || service.Methods().ByName(protoreflect.Name(methodName)) == nil {
		return nil, nil, os.ErrNotExist
	}
	rpc := service.Methods().ByName(protoreflect.Name(methodName))
	if input, err = protoregistry.GlobalTypes.FindMessageByName(rpc.Input().FullName()); err != nil {
		return nil, nil, err
	}
	output, err = protoregistry.GlobalTypes.FindMessageByName(rpc.Output().FullName())
	return input, output, err
}

// setFSType fills in fs_type in every MountVolume inside message.
func setFSType(message protoreflect.Message, fsType string) {
	if message.Descriptor().FullName() == "csi.v1.VolumeCapability.MountVolume" {
		field := message.Descriptor().Fields().ByName("fs_type")
		if message.Get(field).String() == "" {
			message.Set(field, protoreflect.ValueOfString(fsType))
		}
		return
	}
	message.Range(func(field protoreflect.FieldDescriptor, value protoreflect.Value) bool {
		switch {
		case field.IsMap() || field.Message() == nil:
		case field.IsList():
			for i := 0; i < value.List().Len(); i++ {
				setFSType(value.List().Get(i).Message(), fsType)
			}
		default:
			setFSType(value.Message(), fsType)
		}
		return true
	})
}
