package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// Client dials peer daemons. Connections are kept, one per node, and shared
// by every caller; Close ends them.
type Client struct {
	cfg   Config
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewClient makes a client for cfg. It dials nothing yet.
func NewClient(cfg Config) *Client { return &Client{cfg: cfg, conns: map[string]*grpc.ClientConn{}} }

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
	if conn := c.conns[nodeID]; conn != nil {
		return conn, nil
	}
	conn, err := grpc.NewClient("passthrough:///"+nodeID,
		grpc.WithTransportCredentials(credentials.NewTLS(c.cfg.lazyClientTLS(nodeID))),
		grpc.WithContextDialer(dialFirst(addresses)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 20 * time.Second}),
		// A stream is mostly one way and large: a window of a few
		// messages keeps the sender going while the receiver writes.
		grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(streamWindow),
	)
	if err != nil {
		return nil, err
	}
	c.conns[nodeID] = conn
	return conn, nil
}

// Close closes every connection.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for nodeID, conn := range c.conns {
		errs = append(errs, conn.Close())
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
func (c Config) lazyClientTLS(nodeID string) *tls.Config {
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
			return verifyServer(state, creds.roots, nodeID)
		},
	}
}

// Conn is Dial as the interface other packages take (driver.Peers): a
// connection to nodeID's daemon, authenticated as that node.
func (c *Client) Conn(ctx context.Context, nodeID string) (grpc.ClientConnInterface, error) {
	return c.Dial(ctx, nodeID)
}
