package peer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Client dials peer daemons. Connections are kept, one per node, and shared
// by every caller; Close ends them.
type Client struct {
	cfg   Config
	mu    sync.Mutex
	conns map[string]kept
}

// kept is a connection and what its last handshake verified.
type kept struct {
	conn  *grpc.ClientConn
	trust *trust
}

// NewClient makes a client for cfg. It dials nothing yet.
func NewClient(cfg Config) *Client { return &Client{cfg: cfg, conns: map[string]kept{}} }

// Enabled reports whether the channel is configured (Config.Enabled).
func (c *Client) Enabled() bool { return c != nil && c.cfg.Enabled() }

// Dial returns the connection to nodeID's daemon: every handshake on it
// checks that the server's certificate chains to the CA and names nodeID,
// so whatever answers on it is that node. The connection is shared: do not
// close it. Without configuration, or without an address for nodeID, the
// error wraps ErrNotConfigured. The network is reached lazily, at the first
// call (whose error then says what failed).
func (c *Client) Dial(ctx context.Context, nodeID string) (*grpc.ClientConn, error) {
	if !c.Enabled() {
		return nil, ErrNotConfigured
	}
	if nodeID == c.cfg.NodeID {
		return nil, fmt.Errorf("node %q is this node", nodeID)
	}
	addresses, err := c.cfg.Addresses(nodeID)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.conns[nodeID]; ok {
		if c.recheck(nodeID, k.trust) == nil {
			return k.conn, nil
		}
		// Its server is no longer trusted (the CA rotated, its
		// certificate expired): a new connection's handshake decides.
		_ = k.conn.Close()
		delete(c.conns, nodeID)
	}
	tr := &trust{}
	conn, err := grpc.NewClient("passthrough:///"+nodeID,
		grpc.WithTransportCredentials(credentials.NewTLS(c.cfg.lazyClientTLS(nodeID, tr))),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if err := c.recheck(nodeID, tr); err != nil {
				return err
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if err := c.recheck(nodeID, tr); err != nil {
				return nil, err
			}
			return streamer(ctx, desc, cc, method, opts...)
		}),
		grpc.WithContextDialer(dialFirst(addresses)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 20 * time.Second}),
		// A stream is mostly one way and large: a window of a few
		// messages keeps the sender going while the receiver writes.
		grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(streamWindow),
	)
	if err != nil {
		return nil, err
	}
	c.conns[nodeID] = kept{conn: conn, trust: tr}
	return conn, nil
}

// trust is the server's chain as the last handshake on one connection
// verified it.
type trust struct {
	mu    sync.Mutex
	chain []*x509.Certificate
}

func (t *trust) set(chain []*x509.Certificate) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.chain = chain
}

func (t *trust) get() []*x509.Certificate {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.chain
}

// recheck checks, before a call is sent on a kept connection, what its
// handshake checked of the server: that its chain still leads to the CA
// file as it is now and is valid now. The server side checks every caller
// the same way (recheck.go): a node shut out by a rotated CA, or whose
// certificate expired, is neither served nor called. A connection whose
// handshake has not happened yet passes: the handshake checks. Costs one
// read of the CA file and one chain verification per call.
func (c *Client) recheck(nodeID string, tr *trust) error {
	chain := tr.get()
	if chain == nil {
		return nil
	}
	roots, err := c.cfg.loadRoots()
	if err != nil {
		return status.Errorf(codes.Unavailable, "node %s cannot read its peer CA: %v", c.cfg.NodeID, err)
	}
	if err := verifyServer(tls.ConnectionState{PeerCertificates: chain}, roots, nodeID); err != nil {
		return status.Errorf(codes.Unauthenticated, "node %s is no longer trusted: %v", nodeID, err)
	}
	return nil
}

// Close closes every connection.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for nodeID, k := range c.conns {
		errs = append(errs, k.conn.Close())
		delete(c.conns, nodeID)
	}
	return errors.Join(errs...)
}

// dialFirst connects to the first address that answers, in order.
func dialFirst(addresses []string) func(ctx context.Context, _ string) (net.Conn, error) {
	return func(ctx context.Context, _ string) (net.Conn, error) {
		var dialer net.Dialer
		var errs []error
		for _, address := range addresses {
			conn, err := dialer.DialContext(ctx, "tcp", address)
			if err == nil {
				return conn, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
}

// lazyClientTLS trusts a server only when its certificate chains to the CA
// for server authentication and names nodeID (verifyServer). Standard
// host-name verification is off because an address says nothing of who
// answers. The files are read at each handshake, not at Dial: a kept
// connection that reconnects uses a renewed certificate.
func (c Config) lazyClientTLS(nodeID string, tr *trust) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // replaced by VerifyConnection, below
		ServerName:         nodeID,
		NextProtos:         []string{"h2"},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			creds, err := c.load()
			if err != nil {
				return nil, err
			}
			return &creds.certificate, nil
		},
		VerifyConnection: func(state tls.ConnectionState) error {
			creds, err := c.load()
			if err != nil {
				return err
			}
			if err := verifyServer(state, creds.roots, nodeID); err != nil {
				return err
			}
			tr.set(state.PeerCertificates)
			return nil
		},
	}
}

// Conn is Dial as the interface other packages take (forward.Peers): a
// connection to nodeID's daemon, authenticated as that node.
func (c *Client) Conn(ctx context.Context, nodeID string) (grpc.ClientConnInterface, error) {
	return c.Dial(ctx, nodeID)
}
