// Package ctl is `zfs-csi ctl`: a CSI client of the daemon's socket, one
// call per run, the response printed as JSON (the CSI protobuf's JSON form,
// with the spec's field names) for scripts and jq. It plays the part csc
// plays for other drivers, without a separate tool to install.
package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/rpc"
)

// command is one CSI call (or a few, for info) of ctl.
type command struct {
	usage   string // the arguments after the command name
	summary string
	args    int  // how many positional arguments it takes
	more    bool // args is the least; more may follow
	flags   func(*flag.FlagSet, *request)
	call    func(context.Context, *clients, *request) (proto.Message, error)
	// operator: the call goes to the operator's socket, which only the
	// host's root reaches, not to the CSI socket.
	operator bool
}

// request holds what the flags and arguments of a command say.
type request struct {
	args           []string
	size, limit    string
	block          bool
	fsType         string
	accessMode     string
	params         keyValues
	mutable        keyValues
	volumeContext  keyValues
	mountFlags     envflag.List
	fromSnapshot   string
	fromVolume     string
	final          bool
	stagingPath    string
	targetPath     string
	readOnly       bool
	volumeID       string
	snapshotID     string
	maxEntries     int
	startingOffset int64
	startingToken  string
	adopt          adoption
}

// clients holds the service clients of one connection.
type clients struct {
	identity   csi.IdentityClient
	controller csi.ControllerClient
	node       csi.NodeClient
	group      csi.GroupControllerClient
	metadata   csi.SnapshotMetadataClient
	// operator is the operator's socket, dialled for the commands that
	// need it only.
	operator grpc.ClientConnInterface
}

// Run runs one ctl command: zfs-csi ctl [FLAGS] COMMAND [ARGS] [FLAGS].
//
// long: one command's flags, dial, call and output in order; split once the driver package's move lands
func Run(args []string, stdout, stderr io.Writer) error {
	var endpoint, operatorSocket, output string
	var timeout time.Duration
	flags := flag.NewFlagSet("zfs-csi ctl", flag.ContinueOnError)
	flags.SetOutput(stderr)
	envflag.Endpoint(flags, &endpoint)
	envflag.OperatorSocket(flags, &operatorSocket)
	flags.DurationVar(&timeout, "timeout", 2*time.Minute, "deadline of the call")
	flags.StringVar(&output, "o", "json", "output: json (the response), or id (the volume or snapshot IDs it carries, one a line, for shell scripts)")
	if err := ParseFlags(flags, args, func() { printUsage(flags, stderr) }, "zfs-csi ctl -h lists the flags"); err != nil {
		return err
	}
	// The daemon's socket, as its configuration file names it, unless the
	// command line or the environment says otherwise.
	source, err := envflag.EnvironmentAndFile(envflag.ConfigFiles()...)
	if err == nil {
		err = source.Apply(flags)
	}
	if err != nil {
		return err
	}
	if output != "json" && output != "id" {
		return UsageError{Err: fmt.Errorf("-o %q: use json or id", output), Help: "zfs-csi ctl -h lists the flags"}
	}
	if flags.NArg() == 0 {
		printUsage(flags, stderr)
		return fmt.Errorf("name a command")
	}
	name := flags.Arg(0)
	command, ok := commands[name]
	if !ok {
		return UsageError{Err: fmt.Errorf("unknown command %q", name), Help: "zfs-csi ctl -h lists the commands"}
	}
	parsed := &request{}
	commandFlags := flag.NewFlagSet("zfs-csi ctl "+name, flag.ContinueOnError)
	if command.flags != nil {
		command.flags(commandFlags, parsed)
	}
	commandHelp := "zfs-csi ctl " + name + " -h lists its flags"
	commandUsage := func() {
		fmt.Fprintf(stderr, "usage: zfs-csi ctl %s %s\n  %s\n", name, command.usage, command.summary)
		commandFlags.SetOutput(stderr)
		commandFlags.PrintDefaults()
	}
	if parsed.args, err = parseInterleaved(commandFlags, flags.Args()[1:], commandUsage, commandHelp); err != nil {
		return err
	}
	if len(parsed.args) != command.args && !(command.more && len(parsed.args) > command.args) {
		return UsageError{Err: fmt.Errorf("%s takes %d arguments, got %d: zfs-csi ctl %s %s", name, command.args, len(parsed.args), name, command.usage),
			Help: commandHelp}
	}
	if err := reachable(endpoint); err != nil {
		return err
	}
	conn, err := Dial(endpoint)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client := &clients{identity: csi.NewIdentityClient(conn), controller: csi.NewControllerClient(conn), node: csi.NewNodeClient(conn),
		group: csi.NewGroupControllerClient(conn), metadata: csi.NewSnapshotMetadataClient(conn)}
	if command.operator {
		if operatorSocket, err = rpc.OperatorEndpoint(endpoint, operatorSocket); err != nil {
			return err
		}
		if err := reachable(operatorSocket); err != nil {
			return err
		}
		operator, err := Dial(operatorSocket)
		if err != nil {
			return err
		}
		defer operator.Close()
		client.operator = operator
	}
	response, err := command.call(ctx, client, parsed)
	if err != nil {
		if s, ok := status.FromError(err); ok {
			return fmt.Errorf("%s: %s: %s", name, s.Code(), s.Message())
		}
		return err
	}
	if output == "id" {
		return writeIDs(stdout, response)
	}
	return writeProto(stdout, response)
}

func printUsage(flags *flag.FlagSet, out io.Writer) {
	fmt.Fprintln(out, "usage: zfs-csi ctl [--endpoint unix:///run/zfs-csi/csi.sock] [--timeout 2m] [-o json|id] COMMAND [ARGS] [FLAGS]")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		command := commands[name]
		fmt.Fprintf(out, "  %s %s\n      %s\n", name, command.usage, command.summary)
	}
	fmt.Fprintln(out, "\"zfs-csi ctl COMMAND -h\" tells a command's flags. Sizes are "+sizeHelp+": 1G is 10^9 bytes, 1Gi 2^30.")
	flags.SetOutput(out)
	flags.PrintDefaults()
}

// ExitUsage is sysexits' EX_USAGE, the status of a UsageError.
const ExitUsage = 64

// UsageError is a command line that is wrong: a flag the command does not
// have, a value its flag refuses, a command that is not one. Its message is
// the problem and one line that says where the flags are listed: the whole
// usage would bury the one line that matters.
type UsageError struct {
	Err error
	// Help is the line that points to the list: "zfs-csi ctl -h lists the flags".
	Help string
}

func (e UsageError) Error() string   { return e.Err.Error() + "\n" + e.Help }
func (e UsageError) Unwrap() error   { return e.Err }
func (e UsageError) ExitStatus() int { return ExitUsage }

// ParseFlags parses args quietly: -h calls usage and gives flag.ErrHelp,
// any other refusal is a UsageError whose Help is help.
func ParseFlags(flags *flag.FlagSet, args []string, usage func(), help string) error {
	flags.SetOutput(io.Discard)
	flags.Usage = func() {}
	err := flags.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage()
		return err
	case err != nil:
		return UsageError{Err: err, Help: help}
	}
	return nil
}

// reachable connects to the socket once, so that the common reasons a call
// cannot reach the daemon are told with what to do, not as gRPC's
// "connection error" (which the call would otherwise give after retrying).
func reachable(endpoint string) error {
	path, err := rpc.SocketPath(endpoint)
	if err != nil {
		return err
	}
	conn, err := net.DialTimeout("unix", path, 5*time.Second)
	switch {
	case err == nil:
		return conn.Close()
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("no socket at %s: is the daemon running? (systemctl status zfs-csi; journalctl -u zfs-csi) "+
			"Another socket: --endpoint or CSI_ENDPOINT", path)
	case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
		return fmt.Errorf("permission denied on %s: only root may use the daemon's socket (it controls every volume on the host); run ctl as root (sudo)", path)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("nothing serves %s (a socket left behind by a daemon that stopped): is the daemon running? (systemctl status zfs-csi)", path)
	}
	return fmt.Errorf("cannot reach the daemon at %s: %w", path, err)
}

// Dial connects to a CSI unix socket (unix:///path, unix:/path or /path).
func Dial(endpoint string) (*grpc.ClientConn, error) {
	path, err := rpc.SocketPath(endpoint)
	if err != nil {
		return nil, err
	}
	return grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// parseInterleaved parses flags wherever they stand among the positional
// arguments ("create-volume pvc-1 --size 1G" as well as "--size 1G pvc-1").
func parseInterleaved(flags *flag.FlagSet, args []string, usage func(), help string) ([]string, error) {
	var positional []string
	for {
		if err := ParseFlags(flags, args, usage, help); err != nil {
			return nil, err
		}
		args = flags.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional, args = append(positional, args[0]), args[1:]
	}
}

// protojsonOptions print the field names of the CSI spec (volume_id).
var protojsonOptions = protojson.MarshalOptions{UseProtoNames: true}

// writeProto prints a response as indented JSON with the proto field names.
// (protojson varies its spacing on purpose; json.Indent makes it stable.)
func writeProto(out io.Writer, message proto.Message) error {
	raw, err := protojsonOptions.Marshal(message)
	if err != nil {
		return err
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, raw, "", "  "); err != nil {
		return err
	}
	indented.WriteByte('\n')
	_, err = out.Write(indented.Bytes())
	return err
}

// writeIDs prints the volume or snapshot IDs a response carries, one a line.
func writeIDs(out io.Writer, response proto.Message) error {
	var ids []string
	switch r := response.(type) {
	case interface{ GetVolume() *csi.Volume }:
		ids = append(ids, r.GetVolume().GetVolumeId())
	case interface{ GetSnapshot() *csi.Snapshot }:
		ids = append(ids, r.GetSnapshot().GetSnapshotId())
	case interface {
		GetGroupSnapshot() *csi.VolumeGroupSnapshot
	}:
		ids = append(ids, r.GetGroupSnapshot().GetGroupSnapshotId())
		for _, member := range r.GetGroupSnapshot().GetSnapshots() {
			ids = append(ids, member.GetSnapshotId())
		}
	case *csi.ListVolumesResponse:
		for _, entry := range r.GetEntries() {
			ids = append(ids, entry.GetVolume().GetVolumeId())
		}
	case *csi.ListSnapshotsResponse:
		for _, entry := range r.GetEntries() {
			ids = append(ids, entry.GetSnapshot().GetSnapshotId())
		}
	default:
		if proto.Size(response) > 0 {
			return fmt.Errorf("the response carries no volume or snapshot ID; use -o json")
		}
	}
	for _, id := range ids {
		if _, err := fmt.Fprintln(out, id); err != nil {
			return err
		}
	}
	return nil
}

// keyValues is a repeatable k=v flag.
type keyValues map[string]string

func (kv *keyValues) String() string { return fmt.Sprint(map[string]string(*kv)) }

func (kv *keyValues) Set(value string) error {
	key, val, found := strings.Cut(value, "=")
	if !found || key == "" {
		return fmt.Errorf("%q is not key=value", value)
	}
	if *kv == nil {
		*kv = keyValues{}
	}
	(*kv)[key] = val
	return nil
}

// accessMode reads a CSI access mode the way the flag takes it:
// single-node-writer, multi-node-reader-only, …
func accessMode(name string) (csi.VolumeCapability_AccessMode_Mode, error) {
	if name == "" {
		return csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, nil
	}
	var known []string
	for value, enumName := range csi.VolumeCapability_AccessMode_Mode_name {
		flagName := strings.ToLower(strings.ReplaceAll(enumName, "_", "-"))
		if flagName == strings.ToLower(name) && value != 0 {
			return csi.VolumeCapability_AccessMode_Mode(value), nil
		}
		if value != 0 {
			known = append(known, flagName)
		}
	}
	sort.Strings(known)
	return 0, fmt.Errorf("access mode %q: use one of %s", name, strings.Join(known, ", "))
}

// capability is the volume capability the flags describe: block with
// --block, else a mount with --fs-type ("" asks for a ZFS dataset).
func (r *request) capability() (*csi.VolumeCapability, error) {
	if r.block && r.fsType != "" {
		return nil, fmt.Errorf("--block and --fs-type exclude each other")
	}
	mode, err := accessMode(r.accessMode)
	if err != nil {
		return nil, err
	}
	capability := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if r.block {
		capability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		capability.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{
			FsType: r.fsType, MountFlags: r.mountFlags}}
	}
	return capability, nil
}

// capabilityFlags are the flags that describe a capability.
func capabilityFlags(flags *flag.FlagSet, r *request) {
	flags.BoolVar(&r.block, "block", false, "raw block access (a zvol)")
	flags.StringVar(&r.fsType, "fs-type", "", "filesystem: empty or zfs for a dataset, ext4, xfs or btrfs for a formatted zvol")
	flags.StringVar(&r.accessMode, "access-mode", "single-node-writer", "CSI access mode, e.g. single-node-multi-writer")
}

func paramFlags(flags *flag.FlagSet, r *request) {
	flags.Var(&r.params, "param", "a parameter k=v, as a StorageClass gives it; repeatable")
}

func pageFlags(flags *flag.FlagSet, r *request) {
	flags.IntVar(&r.maxEntries, "max-entries", 0, "one page of at most this many entries; 0 lists all pages")
	flags.StringVar(&r.startingToken, "starting-token", "", "where the page starts (the previous page's next_token)")
}
