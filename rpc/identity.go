package rpc

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zfs-csi/zfs-csi/rules"
)

// Identity is the CSI Identity service.
type Identity struct {
	csi.UnimplementedIdentityServer
	cfg          rules.Config
	log          zerolog.Logger
	ready        func(context.Context) error
	capabilities []*csi.PluginCapability
}

// NewIdentity serves the plugin's name and version. ready reports why the
// plugin cannot serve yet (nil when it can); withController adds the
// controller capabilities.
func NewIdentity(cfg rules.Config, log zerolog.Logger, ready func(context.Context) error, withController bool) *Identity {
	service := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	capabilities := []*csi.PluginCapability{service(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS)}
	if withController {
		// Snapshots carry their node as accessible_topology.
		capabilities = append(capabilities, service(csi.PluginCapability_Service_SNAPSHOT_ACCESSIBILITY_CONSTRAINTS))
	}
	if withController {
		capabilities = append(capabilities, service(csi.PluginCapability_Service_CONTROLLER_SERVICE),
			service(csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE),
			service(csi.PluginCapability_Service_SNAPSHOT_METADATA_SERVICE),
			&csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
				VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}})
	}
	return &Identity{cfg: cfg, log: log, ready: ready, capabilities: capabilities}
}

// GetPluginInfo implements csi.IdentityServer.
func (i *Identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.cfg.DriverName, VendorVersion: i.cfg.Version}, nil
}

// GetPluginCapabilities implements csi.IdentityServer.
func (i *Identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: i.capabilities}, nil
}

// Probe implements csi.IdentityServer. A parent dataset that is missing or a
// pool that cannot serve I/O is the spec's "plugin not healthy":
// FAILED_PRECONDITION with the reason (ready=false would mean "still
// initializing", which the daemon never is once it serves).
func (i *Identity) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if err := i.ready(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		i.log.Warn().Err(err).Msg("probe: not healthy")
		return nil, status.Errorf(codes.FailedPrecondition, "not healthy: %v", err)
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
