// Command democlient is the tiny CSI client behind `make demo`: one CSI call per
// invocation, results printed for a person to read. It exists until the driver
// grows its own `zfs-csi ctl` subcommand.
//
//	democlient [-endpoint unix:///run/zfs-csi/csi.sock] COMMAND ARGS...
//
//	info                                     plugin name, version, capabilities
//	create-volume NAME SIZE mount|block      prints the volume ID
//	clone-volume NAME SIZE mount|block SNAPSHOT_ID
//	create-snapshot NAME SOURCE_VOLUME_ID    prints the snapshot ID
//	list-volumes | list-snapshots
//	delete-volume VOLUME_ID | delete-snapshot SNAPSHOT_ID
//
// SIZE takes a plain byte count or a Ki/Mi/Gi suffix.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	endpoint := flag.String("endpoint", "unix:///run/zfs-csi/csi.sock", "CSI endpoint of the driver")
	timeout := flag.Duration("timeout", time.Minute, "deadline of the call")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: democlient [-endpoint URL] COMMAND ARGS... (see the package doc)")
		os.Exit(2)
	}
	if err := run(*endpoint, *timeout, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "democlient:", err)
		os.Exit(1)
	}
}

func run(endpoint string, timeout time.Duration, args []string) error {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := client{
		identity:   csi.NewIdentityClient(conn),
		controller: csi.NewControllerClient(conn),
	}

	command, rest := args[0], args[1:]
	switch {
	case command == "info" && len(rest) == 0:
		return c.info(ctx)
	case command == "create-volume" && len(rest) == 3:
		return c.createVolume(ctx, rest[0], rest[1], rest[2], nil)
	case command == "clone-volume" && len(rest) == 4:
		source := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: rest[3]},
		}}
		return c.createVolume(ctx, rest[0], rest[1], rest[2], source)
	case command == "create-snapshot" && len(rest) == 2:
		return c.createSnapshot(ctx, rest[0], rest[1])
	case command == "list-volumes" && len(rest) == 0:
		return c.listVolumes(ctx)
	case command == "list-snapshots" && len(rest) == 0:
		return c.listSnapshots(ctx)
	case command == "delete-volume" && len(rest) == 1:
		_, err := c.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: rest[0]})
		return err
	case command == "delete-snapshot" && len(rest) == 1:
		_, err := c.controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: rest[0]})
		return err
	}
	return fmt.Errorf("unknown command or wrong arguments: %q", args)
}

type client struct {
	identity   csi.IdentityClient
	controller csi.ControllerClient
}

func (c client) info(ctx context.Context) error {
	plugin, err := c.identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return err
	}
	fmt.Printf("plugin %s %s\n", plugin.GetName(), plugin.GetVendorVersion())
	caps, err := c.controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		return err
	}
	names := make([]string, 0, len(caps.GetCapabilities()))
	for _, capability := range caps.GetCapabilities() {
		names = append(names, capability.GetRpc().GetType().String())
	}
	fmt.Printf("controller capabilities: %s\n", strings.Join(names, ", "))
	return nil
}

func (c client) createVolume(ctx context.Context, name, size, access string, source *csi.VolumeContentSource) error {
	bytes, err := parseSize(size)
	if err != nil {
		return err
	}
	capability, err := volumeCapability(access)
	if err != nil {
		return err
	}
	resp, err := c.controller.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:                name,
		CapacityRange:       &csi.CapacityRange{RequiredBytes: bytes},
		VolumeCapabilities:  []*csi.VolumeCapability{capability},
		VolumeContentSource: source,
	})
	if err != nil {
		return err
	}
	fmt.Println(resp.GetVolume().GetVolumeId())
	return nil
}

func (c client) createSnapshot(ctx context.Context, name, sourceVolumeID string) error {
	resp, err := c.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: sourceVolumeID})
	if err != nil {
		return err
	}
	fmt.Println(resp.GetSnapshot().GetSnapshotId())
	return nil
}

func (c client) listVolumes(ctx context.Context) error {
	resp, err := c.controller.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil {
		return err
	}
	for _, entry := range resp.GetEntries() {
		volume := entry.GetVolume()
		fmt.Printf("%-40s %12d bytes  source=%s\n", volume.GetVolumeId(), volume.GetCapacityBytes(), describeSource(volume.GetContentSource()))
	}
	return nil
}

func (c client) listSnapshots(ctx context.Context) error {
	resp, err := c.controller.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	if err != nil {
		return err
	}
	for _, entry := range resp.GetEntries() {
		snapshot := entry.GetSnapshot()
		fmt.Printf("%-48s of %-36s %12d bytes  ready=%t\n", snapshot.GetSnapshotId(), snapshot.GetSourceVolumeId(), snapshot.GetSizeBytes(), snapshot.GetReadyToUse())
	}
	return nil
}

func describeSource(source *csi.VolumeContentSource) string {
	switch {
	case source.GetSnapshot() != nil:
		return "snapshot " + source.GetSnapshot().GetSnapshotId()
	case source.GetVolume() != nil:
		return "volume " + source.GetVolume().GetVolumeId()
	}
	return "-"
}

func volumeCapability(access string) (*csi.VolumeCapability, error) {
	mode := &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}
	switch access {
	case "mount":
		return &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: mode,
		}, nil
	case "block":
		return &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
			AccessMode: mode,
		}, nil
	}
	return nil, fmt.Errorf("access type %q: want mount or block", access)
}

func parseSize(size string) (int64, error) {
	multiplier := int64(1)
	for suffix, factor := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if trimmed, ok := strings.CutSuffix(size, suffix); ok {
			size, multiplier = trimmed, factor
		}
	}
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("size must be a positive byte count, optionally with Ki, Mi or Gi")
	}
	return n * multiplier, nil
}
