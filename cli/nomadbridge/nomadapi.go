package nomadbridge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// errUnknownAllocation is Nomad's answer for an allocation it does not
// have (404 "alloc not found") or that the token may not see: one in a
// namespace the token may not read is 500 "Unknown allocation" (measured on
// Nomad 1.6.3; the prefix is structs.ErrUnknownAllocationPrefix).
var errUnknownAllocation = errors.New("the bridge's token may not see this allocation in Nomad")

// allocation holds the fields of Nomad's Allocation (GET /v1/allocation/:id)
// that tie it to the plugin job. Nomad's structs carry no JSON tags: the
// names are the Go field names.
type allocation struct {
	ID, Namespace, JobID, TaskGroup, NodeID string
	Job                                     struct {
		TaskGroups []struct {
			Name  string
			Tasks []struct {
				Name            string
				CSIPluginConfig *struct{ ID string }
			}
		}
	}
}

// nomadAPI reads allocations from the local agent's HTTP API. Not the
// github.com/hashicorp/nomad/api module: one GET does not justify its
// dependency tree.
type nomadAPI struct {
	address   string
	tokenFile string
	client    *http.Client
}

// apiTimeout bounds one lookup: the scan loop retries later, and a hung
// agent must not hold the other allocations back.
const apiTimeout = 10 * time.Second

// newNomadAPI takes the address and TLS files the nomad CLI takes
// (NOMAD_ADDR, NOMAD_CACERT, NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY).
func newNomadAPI(address, tokenFile, caCert, clientCert, clientKey string) (*nomadAPI, error) {
	parsed, err := url.Parse(address)
	if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
		return nil, fmt.Errorf("the Nomad address %q: want http://HOST:PORT or https://HOST:PORT", address)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil // the local agent, never through a proxy
	if parsed.Scheme == "https" {
		config := &tls.Config{MinVersion: tls.VersionTLS12}
		if caCert != "" {
			pem, err := os.ReadFile(caCert)
			if err != nil {
				return nil, err
			}
			config.RootCAs = x509.NewCertPool()
			if !config.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s holds no PEM certificate", caCert)
			}
		}
		if clientCert != "" || clientKey != "" {
			pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
			if err != nil {
				return nil, err
			}
			config.Certificates = []tls.Certificate{pair}
		}
		transport.TLSClientConfig = config
	}
	return &nomadAPI{address: strings.TrimSuffix(address, "/"), tokenFile: tokenFile,
		client: &http.Client{Transport: transport, Timeout: apiTimeout}}, nil
}

// token reads the ACL token at every lookup, so that a token created or
// rotated after the bridge started is used without a restart. No file means
// no token: a cluster without ACLs.
func (a *nomadAPI) token() (string, error) {
	if a.tokenFile == "" {
		return "", nil
	}
	file, err := os.Open(a.tokenFile)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return "", err
	}
	// The token reads the plugin job; one that others may read is a leak
	// the operator should hear about rather than one the bridge hides.
	if info.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("the token file %s may be read by others (mode %v): chmod 600 it", a.tokenFile, info.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(file, 4096))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

// Allocation looks one allocation up. The agent forwards the read to the
// servers, which answer from the cluster's state: what the allocation
// belongs to is Nomad's word, not the allocation's.
func (a *nomadAPI) Allocation(ctx context.Context, id string) (*allocation, error) {
	token, err := a.token()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.address+"/v1/allocation/"+url.PathEscape(id), nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("X-Nomad-Token", token)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// A plugin job's allocation with its job is some kilobytes; the bound
	// keeps a confused endpoint from filling the bridge's memory.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusNotFound, strings.HasPrefix(string(body), "Unknown allocation"):
		return nil, errUnknownAllocation
	default:
		return nil, fmt.Errorf("GET /v1/allocation/%s: %s: %s", id, resp.Status, bounded(string(body)))
	}
	var alloc allocation
	if err := json.Unmarshal(body, &alloc); err != nil {
		return nil, fmt.Errorf("GET /v1/allocation/%s: %w", id, err)
	}
	return &alloc, nil
}

// bounded cuts text from elsewhere to a length that fits a log line.
func bounded(text string) string {
	text = strings.TrimSpace(text)
	if len(text) > 200 {
		return text[:200] + "…"
	}
	return text
}
