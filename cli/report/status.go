package report

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/zfs-csi/zfs-csi/cli/ctl"
	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/inventory"
	"github.com/zfs-csi/zfs-csi/rpc/kubelet"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// Status is `zfs-csi status`.
func Status(args []string, stdout, stderr io.Writer) error {
	var endpoint, kubeletDir string
	op, err := parseOperator("status", args, stdout, stderr, func(flags *flag.FlagSet) {
		envflag.Endpoint(flags, &endpoint)
		flags.StringVar(&kubeletDir, "kubelet-dir", rules.DefaultKubeletDir, "kubelet's root directory [ZFS_CSI_KUBELET_DIR]")
	})
	if err != nil {
		return err
	}
	return op.status(endpoint, kubelet.Config{Dir: kubeletDir, DriverName: op.cfg.DriverName}.RegistrationSocket())
}

// statusReport is what `zfs-csi status -o json` prints.
type statusReport struct {
	Driver        string             `json:"driver"`
	NodeID        string             `json:"node_id"`
	Daemon        daemonStatus       `json:"daemon"`
	Registration  registrationStatus `json:"kubelet_registration"`
	Pools         []poolStatus       `json:"pools"`
	Parents       []inventory.Parent `json:"parents"`
	Volumes       map[string]int     `json:"volumes"` // by state
	Snapshots     int                `json:"snapshots"`
	ReaperBacklog int                `json:"reaper_backlog"`
}

type daemonStatus struct {
	Endpoint  string `json:"endpoint"`
	Answering bool   `json:"answering"`
	Ready     bool   `json:"ready"`
	Name      string `json:"name,omitempty"`
	Version   string `json:"version,omitempty"`
	Error     string `json:"error,omitempty"`
}

type registrationStatus struct {
	Socket    string `json:"socket"`
	Present   bool   `json:"present"`
	Answering bool   `json:"answering"`
	Endpoint  string `json:"endpoint,omitempty"` // the CSI socket it tells kubelet
	Error     string `json:"error,omitempty"`
}

type poolStatus struct {
	Name          string  `json:"name"`
	Health        string  `json:"health"`
	Size          uint64  `json:"size_bytes"`
	Allocated     uint64  `json:"allocated_bytes"`
	Free          uint64  `json:"free_bytes"`
	Fragmentation float64 `json:"fragmentation_ratio"`
}

func (op *operator) status(endpoint, registrationSocket string) error {
	inv, err := op.read()
	if err != nil {
		return err
	}
	report := statusReport{Driver: op.cfg.DriverName, NodeID: op.cfg.NodeID, Parents: inv.Parents,
		Volumes:       map[string]int{inventory.StateOK: 0, inventory.StateDeletedHeld: 0, inventory.StateDeletedStuck: 0},
		ReaperBacklog: inv.ReaperBacklog(), Daemon: probeDaemon(endpoint), Registration: probeRegistration(registrationSocket)}
	for _, pool := range inv.Pools {
		report.Pools = append(report.Pools, poolStatus{Name: pool.Name, Health: pool.Health, Size: pool.Size,
			Allocated: pool.Allocated, Free: pool.Free, Fragmentation: float64(pool.Fragmentation) / 100})
	}
	for _, volume := range inv.Volumes {
		report.Volumes[volume.State]++
	}
	for _, snapshot := range inv.Snapshots {
		if snapshot.State == inventory.SnapshotOK {
			report.Snapshots++
		}
	}
	if op.json {
		return op.writeJSON(report)
	}
	return report.write(op.stdout)
}

func (r statusReport) write(out io.Writer) error {
	fmt.Fprintf(out, "driver %s on node %s\n", r.Driver, r.NodeID)
	switch d := r.Daemon; {
	case !d.Answering:
		fmt.Fprintf(out, "daemon: not answering at %s (%s)\n", d.Endpoint, d.Error)
	case !d.Ready:
		fmt.Fprintf(out, "daemon: answering at %s (%s %s) but NOT READY; its log says why\n", d.Endpoint, d.Name, d.Version)
	default:
		fmt.Fprintf(out, "daemon: ready at %s (%s %s)\n", d.Endpoint, d.Name, d.Version)
	}
	switch g := r.Registration; {
	case !g.Present:
		fmt.Fprintf(out, "kubelet registration: no socket at %s (not in Kubernetes mode)\n", g.Socket)
	case !g.Answering:
		fmt.Fprintf(out, "kubelet registration: %s exists but does not answer (%s)\n", g.Socket, g.Error)
	default:
		fmt.Fprintf(out, "kubelet registration: answering at %s, pointing kubelet at %s\n", g.Socket, g.Endpoint)
	}
	fmt.Fprintf(out, "volumes: %d live, %d deleted and held by snapshots or clones, %d deleted and stuck; %d snapshots\n\n",
		r.Volumes[inventory.StateOK], r.Volumes[inventory.StateDeletedHeld], r.Volumes[inventory.StateDeletedStuck], r.Snapshots)
	pools := newTable(out, "POOL", "HEALTH", "SIZE", "ALLOCATED", "FREE", "FRAGMENTATION")
	for _, pool := range r.Pools {
		pools.row(pool.Name, pool.Health, zfs.FormatSize(pool.Size), zfs.FormatSize(pool.Allocated), zfs.FormatSize(pool.Free),
			strconv.Itoa(int(pool.Fragmentation*100))+"%")
	}
	if err := pools.flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	parents := newTable(out, "PARENT DATASET", "EXISTS", "VOLUMES", "USED", "AVAILABLE")
	for _, parent := range r.Parents {
		parents.row(parent.Name, strconv.FormatBool(parent.Exists), strconv.Itoa(parent.Volumes), zfs.FormatSize(parent.Used), zfs.FormatSize(parent.Available))
	}
	return parents.flush()
}

// probeDaemon asks the daemon's socket who it is and whether it is ready.
func probeDaemon(endpoint string) daemonStatus {
	status := daemonStatus{Endpoint: endpoint}
	err := askSocket(endpoint, func(ctx context.Context, conn *grpc.ClientConn) error {
		identity := csi.NewIdentityClient(conn)
		info, err := identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		if err != nil {
			return err
		}
		status.Answering, status.Name, status.Version = true, info.GetName(), info.GetVendorVersion()
		probe, err := identity.Probe(ctx, &csi.ProbeRequest{})
		if err != nil {
			return err
		}
		status.Ready = probe.GetReady() == nil || probe.GetReady().GetValue()
		return nil
	})
	if err != nil {
		status.Error = err.Error()
	}
	return status
}

// probeRegistration asks the kubelet registration socket what it tells
// kubelet. Whether kubelet accepted the plugin only kubelet and the daemon
// know (the daemon logs it).
func probeRegistration(socket string) registrationStatus {
	status := registrationStatus{Socket: socket}
	if _, err := os.Stat(socket); errors.Is(err, os.ErrNotExist) {
		return status
	}
	status.Present = true
	err := askSocket("unix://"+socket, func(ctx context.Context, conn *grpc.ClientConn) error {
		info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
		if err != nil {
			return err
		}
		status.Answering, status.Endpoint = true, info.GetEndpoint()
		return nil
	})
	if err != nil {
		status.Error = strings.TrimSpace(err.Error())
	}
	return status
}

// askSocket connects to a socket and asks it questions under one deadline,
// so that a report never waits long for a daemon that hangs.
func askSocket(endpoint string, questions func(context.Context, *grpc.ClientConn) error) error {
	conn, err := ctl.Dial(endpoint)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return questions(ctx, conn)
}
