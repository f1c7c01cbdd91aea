package forward

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
)

// Forwarding: a controller call whose IDs name another node's
// volume, snapshot or group snapshot is sent to that node's daemon over the
// peer channel and its answer returned, so that a CO may send any controller
// call to any instance (Nomad does; Kubernetes' one leader-elected resizer
// does). The table below is the one home of "which node does this call
// belong to"; the handlers keep refusing another node's IDs, which is what a
// call that cannot be forwarded gets.

// Peers reaches the daemons of other nodes (the peer channel: mutual TLS,
// each peer known by the node ID in its certificate).
type Peers interface {
	// Conn is a connection to nodeID's daemon, or an error when that node
	// is not among the configured peers or cannot be reached.
	Conn(ctx context.Context, nodeID string) (grpc.ClientConnInterface, error)
}

// answeredByKey is the trailer the answering daemon sets: a forwarded call
// whose error lacks it never reached the peer's services (the network or
// the peer's TLS failed), and gets Forward's UNAVAILABLE instead.
const answeredByKey = "zfs-csi-answered-by"

// route is how one method is forwarded: owner is the node its request
// belongs to ("" when an ID does not parse or a topology names no node: the
// handler answers that), call sends the request to a peer.
type route struct {
	owner func(cfg rules.Config, req any) string
	call  func(ctx context.Context, conn grpc.ClientConnInterface, req any, options ...grpc.CallOption) (any, error)
}

// controllerRoute builds a route from the request's owner and the
// generated client's method.
func controllerRoute[Req, Resp any](owner func(rules.Config, *Req) string,
	method func(csi.ControllerClient, context.Context, *Req, ...grpc.CallOption) (*Resp, error)) route {
	return route{
		owner: func(cfg rules.Config, req any) string { return ownerOf(cfg, req, owner) },
		call: func(ctx context.Context, conn grpc.ClientConnInterface, req any, options ...grpc.CallOption) (any, error) {
			return method(csi.NewControllerClient(conn), ctx, req.(*Req), options...)
		},
	}
}

// groupRoute is controllerRoute for the GroupController service.
func groupRoute[Req, Resp any](owner func(rules.Config, *Req) string,
	method func(csi.GroupControllerClient, context.Context, *Req, ...grpc.CallOption) (*Resp, error)) route {
	return route{
		owner: func(cfg rules.Config, req any) string { return ownerOf(cfg, req, owner) },
		call: func(ctx context.Context, conn grpc.ClientConnInterface, req any, options ...grpc.CallOption) (any, error) {
			return method(csi.NewGroupControllerClient(conn), ctx, req.(*Req), options...)
		},
	}
}

func ownerOf[Req any](cfg rules.Config, req any, owner func(rules.Config, *Req) string) string {
	typed, ok := req.(*Req)
	if !ok {
		return ""
	}
	return owner(cfg, typed)
}

// routes are the calls that name a node. The others (ListVolumes,
// GetCapacity, the capabilities, ControllerListVolumeHealth, and Publish,
// which this driver does not offer) are answered by the node they reach.
var routes = map[string]route{
	csi.Controller_CreateVolume_FullMethodName:               controllerRoute(createOwner, csi.ControllerClient.CreateVolume),
	csi.Controller_DeleteVolume_FullMethodName:               controllerRoute(volumeOwner[*csi.DeleteVolumeRequest], csi.ControllerClient.DeleteVolume),
	csi.Controller_ValidateVolumeCapabilities_FullMethodName: controllerRoute(volumeOwner[*csi.ValidateVolumeCapabilitiesRequest], csi.ControllerClient.ValidateVolumeCapabilities),
	csi.Controller_ControllerGetVolume_FullMethodName:        controllerRoute(volumeOwner[*csi.ControllerGetVolumeRequest], csi.ControllerClient.ControllerGetVolume),
	csi.Controller_ControllerGetVolumeHealth_FullMethodName:  controllerRoute(volumeOwner[*csi.ControllerGetVolumeHealthRequest], csi.ControllerClient.ControllerGetVolumeHealth),
	csi.Controller_ControllerExpandVolume_FullMethodName:     controllerRoute(volumeOwner[*csi.ControllerExpandVolumeRequest], csi.ControllerClient.ControllerExpandVolume),
	csi.Controller_ControllerModifyVolume_FullMethodName:     controllerRoute(volumeOwner[*csi.ControllerModifyVolumeRequest], csi.ControllerClient.ControllerModifyVolume),
	csi.Controller_CreateSnapshot_FullMethodName: controllerRoute(func(_ rules.Config, req *csi.CreateSnapshotRequest) string {
		return volumeNode(req.GetSourceVolumeId())
	}, csi.ControllerClient.CreateSnapshot),
	csi.Controller_DeleteSnapshot_FullMethodName: controllerRoute(snapshotOwner[*csi.DeleteSnapshotRequest], csi.ControllerClient.DeleteSnapshot),
	csi.Controller_GetSnapshot_FullMethodName:    controllerRoute(snapshotOwner[*csi.GetSnapshotRequest], csi.ControllerClient.GetSnapshot),
	csi.Controller_ListSnapshots_FullMethodName: controllerRoute(func(_ rules.Config, req *csi.ListSnapshotsRequest) string {
		if req.GetSnapshotId() != "" {
			return snapshotNode(req.GetSnapshotId())
		}
		return volumeNode(req.GetSourceVolumeId())
	}, csi.ControllerClient.ListSnapshots),
	csi.GroupController_CreateVolumeGroupSnapshot_FullMethodName: groupRoute(func(_ rules.Config, req *csi.CreateVolumeGroupSnapshotRequest) string {
		// A group is taken atomically by one pool's channel program: all
		// its members must be one node's. Mixed nodes are the handler's
		// refusal.
		owner := ""
		for i, volumeID := range req.GetSourceVolumeIds() {
			if node := volumeNode(volumeID); i > 0 && node != owner {
				return ""
			} else {
				owner = node
			}
		}
		return owner
	}, csi.GroupControllerClient.CreateVolumeGroupSnapshot),
	csi.GroupController_DeleteVolumeGroupSnapshot_FullMethodName: groupRoute(groupOwner[*csi.DeleteVolumeGroupSnapshotRequest], csi.GroupControllerClient.DeleteVolumeGroupSnapshot),
	csi.GroupController_GetVolumeGroupSnapshot_FullMethodName:    groupRoute(groupOwner[*csi.GetVolumeGroupSnapshotRequest], csi.GroupControllerClient.GetVolumeGroupSnapshot),
}

func volumeOwner[Req interface{ GetVolumeId() string }](_ rules.Config, req Req) string {
	return volumeNode(req.GetVolumeId())
}

func snapshotOwner[Req interface{ GetSnapshotId() string }](_ rules.Config, req Req) string {
	return snapshotNode(req.GetSnapshotId())
}

func groupOwner[Req interface{ GetGroupSnapshotId() string }](_ rules.Config, req Req) string {
	nodeID, _, _, err := rules.ParseGroupSnapshotID(req.GetGroupSnapshotId())
	if err != nil {
		return ""
	}
	return nodeID
}

func volumeNode(volumeID string) string {
	nodeID, _, err := rules.ParseVolumeID(volumeID)
	if err != nil {
		return ""
	}
	return nodeID
}

func snapshotNode(snapshotID string) string {
	nodeID, _, _, err := rules.ParseSnapshotID(snapshotID)
	if err != nil {
		return ""
	}
	return nodeID
}

// createOwner is where a new volume must be made, the same whichever node
// receives the call (so that a forwarded call is never sent on again): the
// first preferred node the requisite topology allows (the CO's choice),
// else the node of a content source when it is allowed (an instant clone
// there), else the first requisite node. Only a call with no topology and
// no source is the receiving node's.
func createOwner(cfg rules.Config, req *csi.CreateVolumeRequest) string {
	requirement := req.GetAccessibilityRequirements()
	allows := func(nodeID string) bool {
		if !rules.ValidNodeID(nodeID) {
			return false
		}
		if len(requirement.GetRequisite()) == 0 {
			return true
		}
		for _, topology := range requirement.GetRequisite() {
			if topology.GetSegments()[cfg.TopologyKey()] == nodeID {
				return true
			}
		}
		return false
	}
	for _, topology := range requirement.GetPreferred() {
		if nodeID := topology.GetSegments()[cfg.TopologyKey()]; allows(nodeID) {
			return nodeID
		}
	}
	if sourceNode := createSourceNode(req); sourceNode != "" && allows(sourceNode) {
		return sourceNode
	}
	for _, topology := range requirement.GetRequisite() {
		if nodeID := topology.GetSegments()[cfg.TopologyKey()]; allows(nodeID) {
			return nodeID
		}
	}
	if len(requirement.GetRequisite()) > 0 {
		return "" // names no node of this driver: refused here
	}
	return cfg.NodeID
}

// Forward is the interceptor that sends calls for other nodes to them
// (Services.Forward). A call whose node is not among peers, or cannot be
// reached, fails UNAVAILABLE with OtherNodeMarker: a CO retries it, and
// Nomad tries the next instance, which may be the volume's own.
func Forward(cfg rules.Config, peers Peers) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		route, named := routes[info.FullMethod]
		if !named {
			return handler(ctx, req)
		}
		nodeID := route.owner(cfg, req)
		if nodeID == "" || nodeID == cfg.NodeID {
			return handler(ctx, req)
		}
		if create, ok := req.(*csi.CreateVolumeRequest); ok {
			if source := createSourceNode(create); source != "" && source != nodeID && source != cfg.NodeID {
				// The owner would have to pull from a third node, which it
				// takes only from the source's or its own instance: the CO
				// asks again there (Nomad tries the next instance).
				return nil, status.Errorf(codes.Unavailable, "%s: this volume belongs on node %q and its source is on node %q: "+
					"ask node %q's plugin instance", rpc.OtherNodeMarker, nodeID, source, nodeID)
			}
		}
		rpc.NoteForward(ctx, nodeID)
		conn, err := peers.Conn(ctx, nodeID)
		if err != nil {
			return nil, unreachable(nodeID, err)
		}
		// The caller's deadline and cancellation go with ctx; its
		// metadata does not (a server's context has no outgoing metadata).
		var trailer metadata.MD
		resp, err := route.call(ctx, conn, req, grpc.Trailer(&trailer))
		if err != nil {
			return nil, peerAnswer(nodeID, err, trailer)
		}
		return resp, nil
	}
}

func unreachable(nodeID string, err error) error {
	return status.Errorf(codes.Unavailable, "%s: this call belongs to node %q, which this node cannot reach: %s",
		rpc.OtherNodeMarker, nodeID, rules.Bounded(status.Convert(err).Message()))
}

// RegisterPeerServices registers the Controller, GroupController and
// SnapshotMetadata of services on the peer channel's server (package peer, which authenticates
// the calling node and logs its calls). There they answer calls forwarded
// to this node, here, never forwarded again, behind this package's panic
// recovery and error mapping, which are made part of the services' own
// handlers (the channel's server serves other services beside them).
func RegisterPeerServices(registrar grpc.ServiceRegistrar, cfg rules.Config, services rpc.Services, callerOf CallerOf) {
	own := chainUnary(rpc.RecoverPanic, knownCaller(callerOf), answerForwarded(cfg), rpc.MapErrors)
	if services.Controller != nil {
		registrar.RegisterService(withInterceptor(&csi.Controller_ServiceDesc, own), services.Controller)
	}
	if services.GroupController != nil {
		registrar.RegisterService(withInterceptor(&csi.GroupController_ServiceDesc, own), services.GroupController)
	}
	if services.SnapshotMetadata != nil {
		registrar.RegisterService(withStreamCheck(&csi.SnapshotMetadata_ServiceDesc, cfg), services.SnapshotMetadata)
	}
}

// withInterceptor is desc with own run inside whatever interceptors the
// server it is registered on has.
func withInterceptor(desc *grpc.ServiceDesc, own grpc.UnaryServerInterceptor) *grpc.ServiceDesc {
	wrapped := *desc
	wrapped.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, method := range desc.Methods {
		handler := method.Handler
		wrapped.Methods[i] = grpc.MethodDesc{MethodName: method.MethodName,
			Handler: func(srv any, ctx context.Context, decode func(any) error, outer grpc.UnaryServerInterceptor) (any, error) {
				return handler(srv, ctx, decode, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, call grpc.UnaryHandler) (any, error) {
					inner := func(ctx context.Context, req any) (any, error) { return own(ctx, req, info, call) }
					if outer == nil {
						return inner(ctx, req)
					}
					return outer(ctx, req, info, inner)
				})
			}}
	}
	return &wrapped
}

// chainUnary runs interceptors outermost first.
func chainUnary(interceptors ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		next := handler
		for i := len(interceptors) - 1; i >= 0; i-- {
			interceptor, inner := interceptors[i], next
			next = func(ctx context.Context, req any) (any, error) { return interceptor(ctx, req, info, inner) }
		}
		return next(ctx, req)
	}
}

// answerForwarded is the peer side of Forward. It takes only what Forward
// sends, calls whose IDs name this node: the peer channel is not a second
// way to list or create anything here, and a call is never forwarded twice
// (the peer services have no Forward; a call naming a third node is
// refused, not passed on). Every answer is marked as this node's
// (answeredByKey).
func answerForwarded(cfg rules.Config) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := grpc.SetTrailer(ctx, metadata.Pairs(answeredByKey, cfg.NodeID)); err != nil {
			return nil, fmt.Errorf("cannot mark the answer: %w", err)
		}
		if route, named := routes[info.FullMethod]; !named || route.owner(cfg, req) != cfg.NodeID {
			return nil, status.Errorf(codes.PermissionDenied, "%s is not a call for node %q: peers forward only calls that name this node",
				info.FullMethod, cfg.NodeID)
		}
		if create, ok := req.(*csi.CreateVolumeRequest); ok {
			caller, _ := PeerCaller(ctx)
			if err := createAccepted(cfg, create, caller); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
}
