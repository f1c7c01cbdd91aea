// Package peer is the channel between zfs-csi daemons on different nodes
// (ARCHITECTURE.md decision 14): gRPC over TCP with mutual TLS, off unless
// the operator configures it. Both ends present a certificate signed by the
// operator's CA; a daemon is known by the node ID its certificate names, in
// a URI subject alternative name "urn:zfs-csi:node:<node ID>" (exactly one;
// a certificate with none or with two is refused). Host names and common
// names play no part: an address says where to connect, the certificate
// says who answered.
//
// The package owns the transport: configuration (Config), loading the
// operator's files (read again for every handshake, so a renewed
// certificate is used without a restart), the server other services
// register on (Server, a grpc.ServiceRegistrar), the client (Client.Dial,
// a connection authenticated as the node asked for), and the transfer
// service (transfer.go) that serves the snapshots this node owns as zfs send
// streams to peers, read-only, through the ownership guard.
//
// A connection outlives its handshake, so the server checks every call's
// caller again, against the CA file as it is at that call (recheck.go), and
// serves one connection for about an hour at most: a node shut out by a new
// CA, or whose certificate expired, is not served on a connection it opened
// before.
package peer
