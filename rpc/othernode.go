package rpc

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// OtherNodeMarker starts the messages of calls refused because they belong to
// another node. Nomad sends controller calls to any node running the plugin,
// ignoring topology, and tries the next one only when the error text holds
// this phrase (nomad/client_csi_endpoint.go, isRetryable); Kubernetes, whose
// node-deployed sidecars only call their own node, sees it when a restore is
// asked of a node that does not hold the snapshot, and reschedules.
const OtherNodeMarker = "CSI client error (retryable)"

// RefusedForOtherNode reports whether a call's error is such a refusal: the
// driver working as designed, not failing (the metrics count these apart).
// A call Forward could not take to its node carries the phrase too, so that
// Nomad tries the next instance, but it is UNAVAILABLE and a failure: a
// peer that cannot be reached is counted as one.
func RefusedForOtherNode(err error) bool {
	return err != nil && status.Code(err) != codes.Unavailable && strings.Contains(status.Convert(err).Message(), OtherNodeMarker)
}
