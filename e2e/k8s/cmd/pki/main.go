// Command pki writes the e2e-k8s cluster's certificates, keys and kubeconfigs
// into one directory: a CA, the apiserver's serving certificate, the service
// account signing key, an admin client (system:masters) and each node's kubelet
// client (system:node:<node>, in kubelet-<node>.kubeconfig), each kubeconfig
// self-contained. The admin's certificate is also the apiserver's client
// certificate towards the kubelets (their x509 authentication trusts the CA).
//
//	pki -dir DIR -node zfs-csi-e2e,zfs-csi-e2e-b -server https://127.0.0.1:6443 -guest-server https://10.0.2.2:6443
//
// Keys are ECDSA P-256 (RSA for the service-account key, which every
// Kubernetes version accepts). Certificates last a week: the directory lives
// for one harness run.
package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	dir := flag.String("dir", "", "output directory")
	nodes := flag.String("node", "zfs-csi-e2e", "the nodes' names, comma-separated")
	server := flag.String("server", "https://127.0.0.1:6443", "apiserver URL for the host's kubeconfigs")
	guestServer := flag.String("guest-server", "https://10.0.2.2:6443", "apiserver URL for the guest's kubeconfigs")
	flag.Parse()
	if *dir == "" {
		fail(fmt.Errorf("-dir is required"))
	}
	if err := run(*dir, strings.Split(*nodes, ","), *server, *guestServer); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "pki:", err)
	os.Exit(1)
}

// kubeconfigFor is one kubeconfig: whose credentials, for which apiserver URL.
type kubeconfigFor struct {
	server string
	p      *pair
}

type pair struct {
	cert *x509.Certificate
	der  []byte
	key  crypto.Signer
}

func run(dir string, nodes []string, server, guestServer string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := issue(nil, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "zfs-csi-e2e-ca"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	})
	if err != nil {
		return err
	}
	api, err := issue(ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.2.2"), net.ParseIP("10.0.0.1")},
	})
	if err != nil {
		return err
	}
	client := func(cn string, orgs ...string) (*pair, error) {
		return issue(ca, &x509.Certificate{
			Subject:     pkix.Name{CommonName: cn, Organization: orgs},
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
	}
	admin, err := client("e2e-admin", "system:masters")
	if err != nil {
		return err
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"sa.key": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)}),
		"sa.pub": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}),
	}
	for name, p := range map[string]*pair{"ca": ca, "apiserver": api, "admin": admin} {
		files[name+".crt"] = certPEM(p)
		k, err := keyPEM(p)
		if err != nil {
			return err
		}
		files[name+".key"] = k
	}
	kubeconfigs := map[string]kubeconfigFor{
		"admin.kubeconfig":       {server, admin},
		"admin-guest.kubeconfig": {guestServer, admin},
	}
	for _, node := range nodes {
		kubelet, err := client("system:node:"+node, "system:nodes")
		if err != nil {
			return err
		}
		kubeconfigs["kubelet-"+node+".kubeconfig"] = kubeconfigFor{guestServer, kubelet}
	}
	for name, kc := range kubeconfigs {
		k, err := kubeconfig(kc.server, ca, kc.p)
		if err != nil {
			return err
		}
		files[name] = k
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// issue makes a key and a certificate from tmpl, signed by parent (self-signed
// when parent is nil).
func issue(parent *pair, tmpl *x509.Certificate) (*pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(7 * 24 * time.Hour)
	signerCert, signerKey := tmpl, crypto.Signer(key)
	if parent != nil {
		signerCert, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, key.Public(), signerKey)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &pair{cert: cert, der: der, key: key}, nil
}

func certPEM(p *pair) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.der})
}

func keyPEM(p *pair) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(p.key.(*ecdsa.PrivateKey))
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// kubeconfig is a one-cluster, one-user kubeconfig with everything embedded.
func kubeconfig(server string, ca, user *pair) ([]byte, error) {
	key, err := keyPEM(user)
	if err != nil {
		return nil, err
	}
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: e2e
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e}
current-context: e2e
`, server, b64(certPEM(ca)), b64(certPEM(user)), b64(key)), nil
}
