// Package forward takes controller calls to the node they belong to over
// the peer channel, and answers them there: the routes (which node a call's
// IDs or topology name), the interceptors that send a call for another
// node to its daemon (Forward, ForwardStreams), the peer side that takes
// only what a CO's call could have become (RegisterPeerServices), the
// peer-only services' registration (RegisterPeerOnly), the calling node of
// a peer call (PeerCaller), and the interfaces the controller reaches
// other nodes through (Peers, Transfers).
//
// It knows no transport: package peer gives it connections and the
// caller's node, package wiring puts the two together.
package forward
