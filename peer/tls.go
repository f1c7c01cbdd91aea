package peer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// NodeURIPrefix begins the URI subject alternative name that says which
// node a certificate is: "urn:zfs-csi:node:node-a" is node-a. A URI, not a
// DNS name: wildcards and several names per certificate are common among
// DNS names and would let one certificate stand for many nodes; a URI is
// matched whole, and a certificate must carry exactly one of this form.
const NodeURIPrefix = "urn:zfs-csi:node:"

// NodeOf is the node ID a certificate names, or why it names none. It does
// not check the certificate's chain: callers do that first.
func NodeOf(cert *x509.Certificate) (string, error) {
	var nodes []string
	for _, uri := range cert.URIs {
		if name := uri.String(); strings.HasPrefix(name, NodeURIPrefix) {
			nodes = append(nodes, strings.TrimPrefix(name, NodeURIPrefix))
		}
	}
	switch {
	case len(nodes) == 0:
		return "", fmt.Errorf("certificate %q names no node (no URI SAN %s<node ID>)", cert.Subject, NodeURIPrefix)
	case len(nodes) > 1:
		return "", fmt.Errorf("certificate %q names %d nodes; one is allowed", cert.Subject, len(nodes))
	case !nodeIDPattern.MatchString(nodes[0]):
		return "", fmt.Errorf("certificate %q names %q, which is not a node ID", cert.Subject, nodes[0])
	}
	return nodes[0], nil
}

// loaded are the operator's files as read for one handshake.
type loaded struct {
	certificate tls.Certificate
	roots       *x509.CertPool
}

// load reads the certificate, key and CA files. A certificate that does not
// name this node is refused: a daemon must never present another's.
func (c Config) load() (loaded, error) {
	certificate, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return loaded{}, fmt.Errorf("peer certificate %s and key %s: %w", c.CertFile, c.KeyFile, err)
	}
	if node, err := NodeOf(certificate.Leaf); err != nil {
		return loaded{}, fmt.Errorf("peer certificate %s: %w", c.CertFile, err)
	} else if node != c.NodeID {
		return loaded{}, fmt.Errorf("peer certificate %s is node %q's; this is node %q", c.CertFile, node, c.NodeID)
	}
	roots, err := c.loadRoots()
	if err != nil {
		return loaded{}, err
	}
	return loaded{certificate: certificate, roots: roots}, nil
}

// loadRoots reads the CA file.
func (c Config) loadRoots() (*x509.CertPool, error) {
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("peer CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("peer CA %s holds no PEM certificate", c.CAFile)
	}
	return roots, nil
}

// Check reads the files once, so that a daemon with a broken configuration
// stops at start instead of at its first transfer.
func (c Config) Check() error {
	if !c.Enabled() {
		return nil
	}
	if err := c.Validate(); err != nil {
		return err
	}
	_, err := c.load()
	return err
}

// serverTLS accepts a client whose certificate chains to the CA for client
// authentication and names a node. The files are read again for each
// client, so that renewed certificates take effect without a restart.
func (c Config) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			creds, err := c.load()
			if err != nil {
				return nil, err
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{creds.certificate},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    creds.roots,
				NextProtos:   []string{"h2"},
				VerifyConnection: func(state tls.ConnectionState) error {
					// The chain is verified by then (RequireAndVerifyClientCert).
					_, err := NodeOf(state.PeerCertificates[0])
					return err
				},
			}, nil
		},
	}
}

// errNoCertificate: the server sent no certificate at all.
var errNoCertificate = errors.New("the peer presented no certificate")

func verifyServer(state tls.ConnectionState, roots *x509.CertPool, nodeID string) error {
	if len(state.PeerCertificates) == 0 {
		return errNoCertificate
	}
	intermediates := x509.NewCertPool()
	for _, cert := range state.PeerCertificates[1:] {
		intermediates.AddCert(cert)
	}
	leaf := state.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("node %s's certificate: %w", nodeID, err)
	}
	node, err := NodeOf(leaf)
	if err != nil {
		return err
	}
	if node != nodeID {
		return fmt.Errorf("the daemon asked for node %q answered with node %q's certificate", nodeID, node)
	}
	return nil
}
