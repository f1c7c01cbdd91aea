package forward

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
)

// CallerOf names the node that made a peer call, from its verified
// certificate (package peer's CallerNode); an error when it names none.
type CallerOf func(ctx context.Context) (string, error)

type callerKey struct{}

// PeerCaller is the node whose daemon made this call over the peer
// channel; ok is false for a call that did not come from a peer (a CO's).
func PeerCaller(ctx context.Context) (nodeID string, ok bool) {
	nodeID, ok = ctx.Value(callerKey{}).(string)
	return nodeID, ok
}

// WithPeerCaller marks ctx as a call made by nodeID's daemon. The peer
// services' interceptor does it from the certificate; tests call it.
func WithPeerCaller(ctx context.Context, nodeID string) context.Context {
	return context.WithValue(ctx, callerKey{}, nodeID)
}

// knownCaller puts the calling node into the context, or refuses a call
// whose certificate names none (the channel's handshake should have).
func knownCaller(callerOf CallerOf) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		nodeID, err := callerOf(ctx)
		if err != nil || !rules.ValidNodeID(nodeID) {
			return nil, status.Errorf(codes.Unauthenticated, "the caller names no node: %v", err)
		}
		return handler(WithPeerCaller(ctx, nodeID), req)
	}
}

// RegisterPeerOnly registers a service that only peers reach (the source
// side of pulls and moves): behind the same panic recovery, caller check
// and error mapping as the forwarded calls, never on a CO's socket.
func RegisterPeerOnly(registrar grpc.ServiceRegistrar, desc *grpc.ServiceDesc, impl any, callerOf CallerOf) {
	registrar.RegisterService(withInterceptor(desc, chainUnary(rpc.RecoverPanic, knownCaller(callerOf), rpc.MapErrors)), impl)
}

// createAccepted is what a peer may ask of this node's CreateVolume: only
// what a CO's call could have become once forwarded here. Its topology
// names this node, or its source is this node's; and a source lives here
// or on the calling node, never on a third node (a peer cannot make this
// node pull from anywhere it likes).
func createAccepted(cfg rules.Config, req *csi.CreateVolumeRequest, caller string) error {
	sourceNode := createSourceNode(req)
	names := sourceNode == cfg.NodeID
	requirement := req.GetAccessibilityRequirements()
	for _, topology := range append(append([]*csi.Topology{}, requirement.GetRequisite()...), requirement.GetPreferred()...) {
		names = names || topology.GetSegments()[cfg.TopologyKey()] == cfg.NodeID
	}
	switch {
	case !names:
		return status.Errorf(codes.PermissionDenied, "a forwarded CreateVolume must name node %q in its topology or have its source there", cfg.NodeID)
	case sourceNode != "" && sourceNode != cfg.NodeID && sourceNode != caller:
		return status.Errorf(codes.PermissionDenied, "a forwarded CreateVolume's source is on node %q, neither this node nor the caller's", sourceNode)
	}
	return nil
}

// createSourceNode is the node a CreateVolume's content source names, ""
// for none (or an ID that does not parse).
func createSourceNode(req *csi.CreateVolumeRequest) string {
	source := req.GetVolumeContentSource()
	if source.GetSnapshot() != nil {
		return snapshotNode(source.GetSnapshot().GetSnapshotId())
	}
	return volumeNode(source.GetVolume().GetVolumeId())
}
