package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
)

// commands are the calls ctl makes, by command name.
var commands = map[string]command{
	"probe": {summary: "Probe: is the plugin ready", call: func(ctx context.Context, c *clients, _ *request) (proto.Message, error) {
		return c.identity.Probe(ctx, &csi.ProbeRequest{})
	}},
	"info": {summary: "plugin name and version, capabilities of every service, node info", call: info},
	"create-volume": {usage: "NAME [--size 1Gi] [--block | --fs-type ext4] [--param k=v]… [--from-snapshot ID | --from-volume ID]",
		summary: "CreateVolume", args: 1, call: createVolume,
		flags: func(flags *flag.FlagSet, r *request) {
			flags.StringVar(&r.size, "size", "", "required bytes (default: the driver's default size, or the source's)")
			flags.StringVar(&r.limit, "limit", "", "limit bytes")
			capabilityFlags(flags, r)
			paramFlags(flags, r)
			flags.Var(&r.mutable, "mutable-param", "a mutable parameter k=v (zfs.<property>); repeatable")
			flags.StringVar(&r.fromSnapshot, "from-snapshot", "", "snapshot ID to make the volume from")
			flags.StringVar(&r.fromVolume, "from-volume", "", "volume ID to clone")
		}},
	"move-volume": {usage: "NAME VOLUME_ID [--final] [--size 1Gi] [--block | --fs-type ext4] [--param k=v]…",
		summary: "moves another node's volume here, on the operator's socket where --allow-moves is set on both nodes: one round while it is in use (ABORTED says what it brought); --final once it stopped makes the volume and deletes the source",
		args:    2, call: moveVolume, operator: true,
		flags: func(flags *flag.FlagSet, r *request) {
			flags.BoolVar(&r.final, "final", false, "the last round: the workload has stopped; make the volume and delete the source")
			flags.StringVar(&r.size, "size", "", "required bytes (default: the source's)")
			capabilityFlags(flags, r)
			paramFlags(flags, r)
		}},
	"adopt": {usage: "DATASET NAME --mode retain|own [--rename] [--parent P] [--size 10Gi] [--block | --fs-type ext4] [--key-from-secrets]",
		summary: "takes an existing dataset or zvol under the driver as volume NAME, on the operator's socket; prints the volume (its ID and volume_context for a static PersistentVolume or nomad volume register)",
		args:    2, call: adopt, operator: true, flags: adoptFlags},
	"release": {usage: "VOLUME_ID", summary: "gives a volume back to the operator, on the operator's socket: the driver's marks go, the data stays",
		args: 1, call: release, operator: true},
	"delete-volume": {usage: "VOLUME_ID", summary: "DeleteVolume", args: 1,
		call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			return c.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: r.args[0]})
		}},
	"get-volume": {usage: "VOLUME_ID", summary: "ControllerGetVolume", args: 1,
		call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			return c.controller.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: r.args[0]})
		}},
	"list-volumes": {usage: "[--max-entries N] [--starting-token T]", summary: "ListVolumes", flags: pageFlags, call: listVolumes},
	"expand-volume": {usage: "VOLUME_ID --size 2Gi [--block | --fs-type ext4]", summary: "ControllerExpandVolume", args: 1,
		flags: func(flags *flag.FlagSet, r *request) {
			flags.StringVar(&r.size, "size", "", "the new size (required bytes)")
			capabilityFlags(flags, r)
		}, call: expandVolume},
	"modify-volume": {usage: "VOLUME_ID --mutable-param zfs.compression=zstd…", summary: "ControllerModifyVolume", args: 1,
		flags: func(flags *flag.FlagSet, r *request) {
			flags.Var(&r.mutable, "mutable-param", "a mutable parameter k=v (zfs.<property>); repeatable")
		}, call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			return c.controller.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: r.args[0], MutableParameters: r.mutable})
		}},
	"get-capacity": {usage: "[--param k=v]… [--block | --fs-type ext4]", summary: "GetCapacity",
		flags: func(flags *flag.FlagSet, r *request) {
			capabilityFlags(flags, r)
			paramFlags(flags, r)
		}, call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			capability, err := r.capability()
			if err != nil {
				return nil, err
			}
			return c.controller.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: r.params,
				VolumeCapabilities: []*csi.VolumeCapability{capability}})
		}},
	"create-snapshot": {usage: "NAME SOURCE_VOLUME_ID [--param k=v]…", summary: "CreateSnapshot", args: 2, flags: paramFlags,
		call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			return c.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: r.args[0], SourceVolumeId: r.args[1], Parameters: r.params})
		}},
	"delete-snapshot": {usage: "SNAPSHOT_ID", summary: "DeleteSnapshot", args: 1,
		call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			return c.controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: r.args[0]})
		}},
	"create-group-snapshot": {usage: "NAME VOLUME_ID VOLUME_ID…", summary: "CreateVolumeGroupSnapshot: the volumes at one instant",
		args: 2, more: true, call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			return c.group.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: r.args[0], SourceVolumeIds: r.args[1:]})
		}},
	"get-group-snapshot": {usage: "GROUP_SNAPSHOT_ID [SNAPSHOT_ID…]", summary: "GetVolumeGroupSnapshot", args: 1, more: true,
		call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			return c.group.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: r.args[0], SnapshotIds: r.args[1:]})
		}},
	"delete-group-snapshot": {usage: "GROUP_SNAPSHOT_ID [SNAPSHOT_ID…]", summary: "DeleteVolumeGroupSnapshot: the group and every member",
		args: 1, more: true, call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			return c.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: r.args[0], SnapshotIds: r.args[1:]})
		}},
	"metadata-allocated": {usage: "SNAPSHOT_ID [--starting-offset N] [--max-results N]",
		summary: "GetMetadataAllocated: the ranges a zvol snapshot holds (the stream's responses in one)", args: 1,
		flags: metadataFlags, call: metadataAllocated},
	"metadata-delta": {usage: "BASE_SNAPSHOT_ID TARGET_SNAPSHOT_ID [--starting-offset N] [--max-results N]",
		summary: "GetMetadataDelta: the ranges that changed between two snapshots of a zvol", args: 2,
		flags: metadataFlags, call: metadataDelta},
	"volume-health": {usage: "VOLUME_ID", summary: "ControllerGetVolumeHealth: the volume's pool and dataset as ZFS sees them", args: 1,
		call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			return c.controller.ControllerGetVolumeHealth(ctx, &csi.ControllerGetVolumeHealthRequest{VolumeId: r.args[0]})
		}},
	"list-volume-health": {usage: "[--max-entries N] [--starting-token T]", summary: "ControllerListVolumeHealth",
		flags: pageFlags, call: listVolumeHealth},
	"node-volume-health": {usage: "VOLUME_ID [--staging-path PATH] [--path PATH]",
		summary: "NodeGetVolumeHealth: the pool, dataset, zvol device and the mounts at the paths given", args: 1,
		flags: func(flags *flag.FlagSet, r *request) {
			flags.StringVar(&r.stagingPath, "staging-path", "", "where the volume is staged")
			flags.StringVar(&r.targetPath, "path", "", "where the volume is published")
		}, call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			return c.node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: r.args[0],
				StagingTargetPath: r.stagingPath, VolumePublishPath: r.targetPath})
		}},
	"storage-health": {summary: "NodeGetStorageHealth: each pool holding a parent dataset",
		call: func(ctx context.Context, c *clients, _ *request) (proto.Message, error) {
			return c.node.NodeGetStorageHealth(ctx, &csi.NodeGetStorageHealthRequest{})
		}},
	"list-snapshots": {usage: "[--volume VOLUME_ID | --snapshot SNAPSHOT_ID] [--max-entries N] [--starting-token T]",
		summary: "ListSnapshots", call: listSnapshots,
		flags: func(flags *flag.FlagSet, r *request) {
			flags.StringVar(&r.volumeID, "volume", "", "only the snapshots of this volume")
			flags.StringVar(&r.snapshotID, "snapshot", "", "only this snapshot")
			pageFlags(flags, r)
		}},
	"stage": {usage: "VOLUME_ID STAGING_PATH [--block | --fs-type ext4] [--mount-flag f]… [--context k=v]…",
		summary: "NodeStageVolume (kind and context read from the volume unless given)", args: 2, flags: nodeFlags, call: stage},
	"unstage": {usage: "VOLUME_ID STAGING_PATH", summary: "NodeUnstageVolume", args: 2,
		call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			return c.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: r.args[0], StagingTargetPath: r.args[1]})
		}},
	"publish": {usage: "VOLUME_ID TARGET_PATH --staging-path PATH [--readonly] [--block | --fs-type ext4] [--mount-flag f]…",
		summary: "NodePublishVolume (kind and context read from the volume unless given)", args: 2, call: publish,
		flags: func(flags *flag.FlagSet, r *request) {
			nodeFlags(flags, r)
			flags.StringVar(&r.stagingPath, "staging-path", "", "where the volume is staged (required)")
			flags.BoolVar(&r.readOnly, "readonly", false, "publish read-only")
		}},
	"unpublish": {usage: "VOLUME_ID TARGET_PATH", summary: "NodeUnpublishVolume", args: 2,
		call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			return c.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: r.args[0], TargetPath: r.args[1]})
		}},
	"node-expand-volume": {usage: "VOLUME_ID PATH --size 2Gi [--staging-path PATH]", summary: "NodeExpandVolume", args: 2,
		flags: func(flags *flag.FlagSet, r *request) {
			flags.StringVar(&r.size, "size", "", "the new size (required bytes)")
			flags.StringVar(&r.stagingPath, "staging-path", "", "where the volume is staged")
		}, call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			size, err := parseSize(r.size)
			if err != nil {
				return nil, err
			}
			return c.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: r.args[0], VolumePath: r.args[1],
				StagingTargetPath: r.stagingPath, CapacityRange: &csi.CapacityRange{RequiredBytes: size}})
		}},
	"volume-stats": {usage: "VOLUME_ID PATH", summary: "NodeGetVolumeStats", args: 2,
		call: func(ctx context.Context, c *clients, r *request) (proto.Message, error) {
			return c.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: r.args[0], VolumePath: r.args[1]})
		}},
}

// info gathers what the plugin says about itself into one JSON object.
func info(ctx context.Context, c *clients, _ *request) (proto.Message, error) {
	calls := []struct {
		key  string
		call func() (proto.Message, error)
	}{
		{"plugin_info", func() (proto.Message, error) { return c.identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}) }},
		{"plugin_capabilities", func() (proto.Message, error) {
			return c.identity.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
		}},
		{"controller_capabilities", func() (proto.Message, error) {
			return c.controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
		}},
		{"group_controller_capabilities", func() (proto.Message, error) {
			return c.group.GroupControllerGetCapabilities(ctx, &csi.GroupControllerGetCapabilitiesRequest{})
		}},
		{"node_capabilities", func() (proto.Message, error) {
			return c.node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
		}},
		{"node_info", func() (proto.Message, error) { return c.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{}) }},
	}
	fields := map[string]any{}
	for _, call := range calls {
		response, err := call.call()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", call.key, err)
		}
		fields[call.key] = protoToAny(response)
	}
	return structpb.NewStruct(fields)
}

// protoToAny turns a message into the generic form structpb takes.
func protoToAny(message proto.Message) any {
	raw, _ := protojsonOptions.Marshal(message)
	var value any
	_ = json.Unmarshal(raw, &value)
	return value
}

func createVolume(ctx context.Context, c *clients, r *request) (proto.Message, error) {
	request, err := createRequest(r)
	if err != nil {
		return nil, err
	}
	return c.controller.CreateVolume(ctx, request)
}

// createRequest is the CreateVolume the flags ask for.
func createRequest(r *request) (*csi.CreateVolumeRequest, error) {
	capability, err := r.capability()
	if err != nil {
		return nil, err
	}
	required, err := parseSize(r.size)
	if err != nil {
		return nil, err
	}
	limit, err := parseSize(r.limit)
	if err != nil {
		return nil, err
	}
	request := &csi.CreateVolumeRequest{Name: r.args[0], VolumeCapabilities: []*csi.VolumeCapability{capability},
		Parameters: r.params, MutableParameters: r.mutable}
	if required > 0 || limit > 0 {
		request.CapacityRange = &csi.CapacityRange{RequiredBytes: required, LimitBytes: limit}
	}
	switch {
	case r.fromSnapshot != "" && r.fromVolume != "":
		return nil, fmt.Errorf("--from-snapshot and --from-volume exclude each other")
	case r.fromSnapshot != "":
		request.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: r.fromSnapshot}}}
	case r.fromVolume != "":
		request.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: r.fromVolume}}}
	}
	return request, nil
}

// moveVolume asks this node's daemon, on the operator's socket, for a round
// of a move: a CreateVolumeRequest whose source is the other node's volume
// and whose requisite topology is this node (NodeGetInfo).
func moveVolume(ctx context.Context, c *clients, r *request) (proto.Message, error) {
	info, err := c.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return nil, err
	}
	r.args, r.fromVolume = r.args[:1], r.args[1]
	request, err := createRequest(r)
	if err != nil {
		return nil, err
	}
	request.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{info.GetAccessibleTopology()}}
	method := rpc.OperatorMoveRound
	if r.final {
		method = rpc.OperatorMoveFinal
	}
	response := &csi.CreateVolumeResponse{}
	if err := c.operator.Invoke(ctx, "/"+rpc.OperatorService+"/"+method, request, response); err != nil {
		return nil, err
	}
	return response, nil
}

func expandVolume(ctx context.Context, c *clients, r *request) (proto.Message, error) {
	size, err := parseSize(r.size)
	if err != nil || size == 0 {
		return nil, fmt.Errorf("--size: give the new size (%v)", err)
	}
	capability, err := r.capability()
	if err != nil {
		return nil, err
	}
	return c.controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: r.args[0],
		CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapability: capability})
}

// listVolumeHealth lists one page, or every page merged into one response.
func listVolumeHealth(ctx context.Context, c *clients, r *request) (proto.Message, error) {
	all := &csi.ControllerListVolumeHealthResponse{}
	token := r.startingToken
	for {
		page, err := c.controller.ControllerListVolumeHealth(ctx, &csi.ControllerListVolumeHealthRequest{
			MaxEntries: int32(r.maxEntries), StartingToken: token})
		if err != nil || r.maxEntries > 0 {
			return page, err
		}
		all.Entries = append(all.Entries, page.GetEntries()...)
		if token = page.GetNextToken(); token == "" {
			return all, nil
		}
	}
}

// listVolumes lists one page, or every page merged into one response.
func listVolumes(ctx context.Context, c *clients, r *request) (proto.Message, error) {
	all := &csi.ListVolumesResponse{}
	token := r.startingToken
	for {
		page, err := c.controller.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: int32(r.maxEntries), StartingToken: token})
		if err != nil || r.maxEntries > 0 {
			return page, err
		}
		all.Entries = append(all.Entries, page.GetEntries()...)
		if token = page.GetNextToken(); token == "" {
			return all, nil
		}
	}
}

func listSnapshots(ctx context.Context, c *clients, r *request) (proto.Message, error) {
	all := &csi.ListSnapshotsResponse{}
	token := r.startingToken
	for {
		page, err := c.controller.ListSnapshots(ctx, &csi.ListSnapshotsRequest{MaxEntries: int32(r.maxEntries), StartingToken: token,
			SourceVolumeId: r.volumeID, SnapshotId: r.snapshotID})
		if err != nil || r.maxEntries > 0 {
			return page, err
		}
		all.Entries = append(all.Entries, page.GetEntries()...)
		if token = page.GetNextToken(); token == "" {
			return all, nil
		}
	}
}

func nodeFlags(flags *flag.FlagSet, r *request) {
	capabilityFlags(flags, r)
	flags.Var(&r.mountFlags, "mount-flag", "a mount flag (noatime, …); repeatable")
	flags.Var(&r.volumeContext, "context", "a volume context entry k=v; repeatable (default: the context the controller gives the volume)")
}

// nodeCapability completes a node call's capability and volume context:
// what the flags say, else what the controller says of the volume (its kind
// and filesystem), the way a CO passes on CreateVolume's answer.
func (r *request) nodeCapability(ctx context.Context, c *clients) (*csi.VolumeCapability, error) {
	if !r.block && r.fsType == "" || r.volumeContext == nil {
		response, err := c.controller.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: r.args[0]})
		if err != nil {
			return nil, fmt.Errorf("reading the volume's kind (give --block or --fs-type, and --context, to skip this): %w", err)
		}
		volumeContext := response.GetVolume().GetVolumeContext()
		if r.volumeContext == nil {
			r.volumeContext = volumeContext
		}
		if !r.block && r.fsType == "" {
			r.block = volumeContext[rules.ContextKind] == rules.KindZvol && volumeContext[rules.ContextFSType] == ""
			r.fsType = volumeContext[rules.ContextFSType]
		}
	}
	return r.capability()
}

func stage(ctx context.Context, c *clients, r *request) (proto.Message, error) {
	capability, err := r.nodeCapability(ctx, c)
	if err != nil {
		return nil, err
	}
	return c.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: r.args[0], StagingTargetPath: r.args[1],
		VolumeCapability: capability, VolumeContext: r.volumeContext})
}

func publish(ctx context.Context, c *clients, r *request) (proto.Message, error) {
	if r.stagingPath == "" {
		return nil, fmt.Errorf("--staging-path is required: the path the volume was staged at")
	}
	capability, err := r.nodeCapability(ctx, c)
	if err != nil {
		return nil, err
	}
	return c.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: r.args[0], TargetPath: r.args[1],
		StagingTargetPath: r.stagingPath, VolumeCapability: capability, Readonly: r.readOnly, VolumeContext: r.volumeContext})
}

func metadataFlags(flags *flag.FlagSet, r *request) {
	flags.Int64Var(&r.startingOffset, "starting-offset", 0, "the byte to start from")
	flags.IntVar(&r.maxEntries, "max-results", 0, "extents per response (0: the plugin's choice)")
}

// metadataAllocated reads the whole stream into one response.
func metadataAllocated(ctx context.Context, c *clients, r *request) (proto.Message, error) {
	stream, err := c.metadata.GetMetadataAllocated(ctx, &csi.GetMetadataAllocatedRequest{SnapshotId: r.args[0],
		StartingOffset: r.startingOffset, MaxResults: int32(r.maxEntries)})
	if err != nil {
		return nil, err
	}
	all := &csi.GetMetadataAllocatedResponse{}
	return all, drainStream(stream.Recv, func(response *csi.GetMetadataAllocatedResponse) {
		all.BlockMetadataType, all.VolumeCapacityBytes = response.GetBlockMetadataType(), response.GetVolumeCapacityBytes()
		all.BlockMetadata = append(all.BlockMetadata, response.GetBlockMetadata()...)
	})
}

// metadataDelta reads the whole stream into one response.
func metadataDelta(ctx context.Context, c *clients, r *request) (proto.Message, error) {
	stream, err := c.metadata.GetMetadataDelta(ctx, &csi.GetMetadataDeltaRequest{BaseSnapshotId: r.args[0], TargetSnapshotId: r.args[1],
		StartingOffset: r.startingOffset, MaxResults: int32(r.maxEntries)})
	if err != nil {
		return nil, err
	}
	all := &csi.GetMetadataDeltaResponse{}
	return all, drainStream(stream.Recv, func(response *csi.GetMetadataDeltaResponse) {
		all.BlockMetadataType, all.VolumeCapacityBytes = response.GetBlockMetadataType(), response.GetVolumeCapacityBytes()
		all.BlockMetadata = append(all.BlockMetadata, response.GetBlockMetadata()...)
	})
}

// drainStream receives until the stream ends.
func drainStream[T any](recv func() (T, error), take func(T)) error {
	for {
		response, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		take(response)
	}
}
