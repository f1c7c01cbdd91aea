// Package peertest makes what tests of the peer channel need: a CA of
// their own and node certificates from it, written to files as an operator
// would give them. Production code never imports it.
package peertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
	// File is the CA certificate's PEM file, what --peer-ca names.
	File string
}

// Files are one node's credentials as files.
type Files struct{ Cert, Key, CA string }

// NewCA makes a CA whose files live in a temporary directory of t.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	template := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{cert: cert, key: key, dir: t.TempDir()}
	ca.File = writePEM(t, filepath.Join(ca.dir, name+"-ca.pem"), "CERTIFICATE", der)
	return ca
}

// Node issues a certificate for client and server authentication naming
// the given URIs (peer.NodeURIPrefix+nodeID for a well-made one), valid for
// a day, and returns its files with the CA's.
func (ca *CA) Node(t testing.TB, commonName string, uris ...string) Files {
	t.Helper()
	return ca.NodeUntil(t, time.Now().Add(24*time.Hour), commonName, uris...)
}

// NodeUntil is Node with a certificate that expires at notAfter, to the
// second (a certificate holds no finer time): a short-lived one for a test
// of expiry. NotAfter is when it stops being valid.
func (ca *CA) NodeUntil(t testing.TB, notAfter time.Time, commonName string, uris ...string) Files {
	t.Helper()
	dir := t.TempDir()
	files := Files{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem"), CA: ca.File}
	ca.write(t, files, notAfter, commonName, uris)
	return files
}

// NotAfter is the time the certificate in files stops being valid.
func NotAfter(t testing.TB, files Files) time.Time {
	t.Helper()
	data, err := os.ReadFile(files.Cert)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s holds no PEM", files.Cert)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.NotAfter
}

// Renew is a node's part of rotating the CA, as an operator does it: a new
// certificate from ca, valid for a day, and ca's own certificate replace
// the files of files in place (each written beside and renamed over, so a
// reader sees the old file or the new one whole). A daemon reading files
// then trusts ca alone.
func (ca *CA) Renew(t testing.TB, files Files, commonName string, uris ...string) {
	t.Helper()
	ca.write(t, files, time.Now().Add(24*time.Hour), commonName, uris)
	data, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	replace(t, files.CA, data)
}

// write issues a certificate for client and server authentication from ca
// and puts it and its key at files.Cert and files.Key.
func (ca *CA) write(t testing.TB, files Files, notAfter time.Time, commonName string, uris []string) {
	t.Helper()
	key := newKey(t)
	template := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	for _, uri := range uris {
		parsed, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		template.URIs = append(template.URIs, parsed)
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	replace(t, files.Key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	replace(t, files.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// replace writes data beside path and renames it over path.
func replace(t testing.TB, path string, data []byte) {
	t.Helper()
	next := path + ".next"
	if err := os.WriteFile(next, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, path, kind string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
