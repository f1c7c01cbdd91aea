package peer

import (
	"context"
	"crypto/x509"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A connection's certificate is verified at its handshake, and a
// connection lives long (keepalives, connectionAge). Shutting a node out
// (renewing the other nodes' certificates from a new CA) or a certificate
// expiring must not wait for it to end: every call checks the caller's
// certificate again, against the CA file as it is at that call.

// authorizeCall runs a unary call only for a caller that passes authorize.
func (s *Server) authorizeCall(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// authorizeStream runs a streaming call only for a caller that passes
// authorize. The check is made when the call begins; a stream under way
// runs on until it ends or its connection's age cuts it.
func (s *Server) authorizeStream(srv any, stream grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.authorize(stream.Context()); err != nil {
		return err
	}
	return handler(srv, stream)
}

// authorize checks what the handshake checked of the caller's certificate
// as things are now: that it chains to the CA file read again (no cache: a
// file rotated a moment ago counts), that it is valid at this moment and
// for client authentication, and that it still names the node the
// connection was accepted as. A caller that fails is UNAUTHENTICATED. A CA
// file this node cannot read is its own fault, not the caller's: the call
// is UNAVAILABLE (a puller retries), and nothing is served meanwhile.
func (s *Server) authorize(ctx context.Context) error {
	caller, err := CallerNode(ctx)
	if err != nil {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	state, _ := TLSState(ctx) // CallerNode found it
	roots, err := s.cfg.loadRoots()
	if err != nil {
		s.log.Error().Err(err).Str("caller", caller).Msg("cannot check a peer's certificate")
		return status.Errorf(codes.Unavailable, "node %s cannot read its peer CA: retry later", s.cfg.NodeID)
	}
	node, err := verifyClient(state.PeerCertificates, roots, time.Now())
	if err != nil {
		return status.Errorf(codes.Unauthenticated, "node %s's certificate is no longer accepted: %v", caller, err)
	}
	if node != caller {
		return status.Errorf(codes.Unauthenticated, "the certificate names node %q; the connection is node %q's", node, caller)
	}
	return nil
}

// verifyClient verifies a client's chain as presented (leaf first, then
// intermediates) against roots at now, and returns the node it names.
func verifyClient(chain []*x509.Certificate, roots *x509.CertPool, now time.Time) (string, error) {
	if len(chain) == 0 {
		return "", errNoCertificate
	}
	intermediates := x509.NewCertPool()
	for _, cert := range chain[1:] {
		intermediates.AddCert(cert)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return "", err
	}
	return NodeOf(chain[0])
}
