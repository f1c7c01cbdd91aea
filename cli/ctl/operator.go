package ctl

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/zfs-csi/zfs-csi/rpc"
)

// adoption is what adopt's flags say.
type adoption struct {
	mode           string
	rename         bool
	parent         string
	keyFromSecrets bool
}

func adoptFlags(flags *flag.FlagSet, r *request) {
	flags.StringVar(&r.adopt.mode, "mode", "", "retain (served, never destroyed: DeleteVolume forgets it) or own (a volume like any other); required")
	flags.BoolVar(&r.adopt.rename, "rename", false, "move the dataset to its volume's place under the parent with one zfs rename")
	flags.StringVar(&r.adopt.parent, "parent", "", "the parent dataset it goes under (default: the first)")
	flags.StringVar(&r.size, "size", "", "a filesystem without refquota gets this size as its refquota")
	flags.BoolVar(&r.adopt.keyFromSecrets, "key-from-secrets", false, "an encrypted one's key comes from the CSI secrets at staging (keylocation=prompt); otherwise its keylocation stays")
	flags.BoolVar(&r.block, "block", false, "a zvol used as a raw block volume")
	flags.StringVar(&r.fsType, "fs-type", "", "a zvol's filesystem as it holds it: ext4, xfs or btrfs (checked, never formatted)")
}

// adopt asks the operator's socket to adopt existing data.
func adopt(ctx context.Context, c *clients, r *request) (proto.Message, error) {
	if r.adopt.mode != "retain" && r.adopt.mode != "own" {
		return nil, fmt.Errorf("--mode: choose retain or own")
	}
	if r.block && r.fsType != "" {
		return nil, fmt.Errorf("--block and --fs-type exclude each other")
	}
	size, err := parseSize(r.size)
	if err != nil {
		return nil, err
	}
	fields := map[string]any{rpc.AdoptDataset: r.args[0], rpc.AdoptName: r.args[1], rpc.AdoptMode: r.adopt.mode,
		rpc.AdoptRename: strconv.FormatBool(r.adopt.rename), rpc.AdoptFSType: r.fsType,
		rpc.AdoptKeyFromSecrets: strconv.FormatBool(r.adopt.keyFromSecrets)}
	if r.adopt.parent != "" {
		fields[rpc.AdoptParent] = r.adopt.parent
	}
	if size > 0 {
		fields[rpc.AdoptSize] = strconv.FormatInt(size, 10)
	}
	return callOperator(ctx, c, rpc.OperatorAdopt, fields)
}

// release asks the operator's socket to give a volume back.
func release(ctx context.Context, c *clients, r *request) (proto.Message, error) {
	return callOperator(ctx, c, rpc.OperatorRelease, map[string]any{rpc.ReleaseVolumeID: r.args[0]})
}

func callOperator(ctx context.Context, c *clients, method string, fields map[string]any) (proto.Message, error) {
	request, err := structpb.NewStruct(fields)
	if err != nil {
		return nil, err
	}
	volume := &csi.Volume{}
	if err := c.operator.Invoke(ctx, "/"+rpc.OperatorService+"/"+method, request, volume); err != nil {
		return nil, err
	}
	return volume, nil
}
