package daemon

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/zfs-csi/zfs-csi/wiring/wiringtest"
)

func TestTheMetricsListenerWithTLSAndBasicAuth(t *testing.T) {
	dir := t.TempDir()
	roots := writeSelfSignedCertificate(t, dir, "metrics.crt", "metrics.key")
	const password, otherPassword = "correct horse battery staple", "a password set later"
	// Relative paths: exporter-toolkit resolves them from the file's directory.
	webConfig := writeWebConfig(t, dir, "tls_server_config:\n  cert_file: metrics.crt\n  key_file: metrics.key\n"+
		"basic_auth_users:\n  prometheus: "+bcryptHash(t, password)+"\n")
	listener, logs := startTelemetry(t, options{metricsAddress: "127.0.0.1:0", metricsWebConfig: webConfig})
	httpsURL := "https://" + listener + "/metrics"
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}

	t.Run("a scrape with the right user and password gets the metrics over TLS", func(t *testing.T) {
		status, body := scrape(t, client, httpsURL, "prometheus", password)
		if status != http.StatusOK || !strings.Contains(body, "zfs_csi_build_info") {
			t.Errorf("got %d:\n%.300s", status, body)
		}
	})
	for _, test := range []struct{ name, user, password string }{
		{"a wrong password gets 401 and no metrics", "prometheus", "not the password"},
		{"an unknown user gets 401 and no metrics", "someone", password},
		{"no credentials get 401 and no metrics", "", ""},
	} {
		t.Run(test.name, func(t *testing.T) {
			status, body := scrape(t, client, httpsURL, test.user, test.password)
			if status != http.StatusUnauthorized || strings.Contains(body, "zfs_csi_") {
				t.Errorf("got %d:\n%.300s", status, body)
			}
		})
	}
	t.Run("plain HTTP gets no metrics, even with the right password", func(t *testing.T) {
		status, body := scrape(t, client, "http://"+listener+"/metrics", "prometheus", password)
		if status == http.StatusOK || strings.Contains(body, "zfs_csi_") {
			t.Errorf("got %d over plain HTTP:\n%.300s", status, body)
		}
	})
	t.Run("a client that does not trust the certificate is refused", func(t *testing.T) {
		untrusting := &http.Client{Timeout: 10 * time.Second}
		request, _ := http.NewRequest(http.MethodGet, httpsURL, nil)
		request.SetBasicAuth("prometheus", password)
		if response, err := untrusting.Do(request); err == nil {
			response.Body.Close()
			t.Errorf("a client without the certificate got %s", response.Status)
		}
	})
	t.Run("a password changed in the file counts from the next request, without a restart", func(t *testing.T) {
		writeWebConfig(t, dir, "tls_server_config:\n  cert_file: metrics.crt\n  key_file: metrics.key\n"+
			"basic_auth_users:\n  prometheus: "+bcryptHash(t, otherPassword)+"\n")
		if status, _ := scrape(t, client, httpsURL, "prometheus", password); status != http.StatusUnauthorized {
			t.Errorf("the old password got %d, want 401", status)
		}
		if status, _ := scrape(t, client, httpsURL, "prometheus", otherPassword); status != http.StatusOK {
			t.Errorf("the new password got %d, want 200", status)
		}
	})
	t.Run("no password is logged", func(t *testing.T) {
		for _, secret := range []string{password, otherPassword, "not the password"} {
			if strings.Contains(logs.String(), secret) {
				t.Errorf("the log holds %q:\n%s", secret, logs.String())
			}
		}
		if !strings.Contains(logs.String(), "TLS is enabled") {
			t.Errorf("the log does not say TLS is on:\n%s", logs.String())
		}
	})
}

func TestTheMetricsListenerWithoutAWebConfigServesPlainHTTPOnLoopback(t *testing.T) {
	// A bare port, as README's quick start gives it; 0 lets the kernel pick one.
	listener, _ := startTelemetry(t, options{metricsAddress: "0"})
	host, _, err := net.SplitHostPort(listener)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("a bare port listens on %s, want a loopback address", listener)
	}
	status, body := scrape(t, http.DefaultClient, "http://"+listener+"/metrics", "", "")
	if status != http.StatusOK || !strings.Contains(body, "zfs_csi_build_info") {
		t.Errorf("got %d:\n%.300s", status, body)
	}
}

func TestABadWebConfigStopsTheDaemonWithExit78NamingTheOption(t *testing.T) {
	const plaintext = "hunter2-in-plain-text"
	dir := t.TempDir()
	writeSelfSignedCertificate(t, dir, "metrics.crt", "metrics.key")
	writeSelfSignedCertificate(t, dir, "other.crt", "other.key")
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	address := []string{"--metrics-address", "127.0.0.1:0"}
	tests := []struct {
		name string
		args []string
		want string // in the error besides the option's name
	}{
		{"a file that does not exist", append(address, "--metrics-web-config", filepath.Join(dir, "missing.yml")), ""},
		{"a directory", append(address, "--metrics-web-config", dir), ""},
		{"a file that is not YAML", append(address, "--metrics-web-config", write("broken.yml", "tls_server_config: [\n")), ""},
		{"a key exporter-toolkit does not know", append(address, "--metrics-web-config", write("unknown.yml", "tls_config:\n  cert_file: metrics.crt\n")), ""},
		{"a certificate file that does not exist", append(address, "--metrics-web-config",
			write("nocert.yml", "tls_server_config:\n  cert_file: gone.crt\n  key_file: metrics.key\n")), ""},
		{"a key that is not the certificate's", append(address, "--metrics-web-config",
			write("mismatch.yml", "tls_server_config:\n  cert_file: metrics.crt\n  key_file: other.key\n")), ""},
		{"a password where its bcrypt hash belongs", append(address, "--metrics-web-config",
			write("plaintext.yml", "basic_auth_users:\n  prometheus: "+plaintext+"\n")), "not a bcrypt hash"},
		{"a web config without a metrics address", []string{"--metrics-web-config", write("alone.yml", "")}, "--metrics-address is not"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			var stderr bytes.Buffer
			args := append([]string{"--parent-dataset", "tank/csi", "--node-id", "node-1", "--log-format", "json"}, test.args...)
			err := Run("test", args, &stderr)
			if err == nil {
				t.Fatal("Run accepted it")
			}
			if ExitCode(err) != 78 {
				t.Errorf("exit code %d for %v, want 78", ExitCode(err), err)
			}
			if !strings.Contains(err.Error(), "--metrics-web-config") || !strings.Contains(err.Error(), test.want) {
				t.Errorf("the error does not name the option (or say %q): %v", test.want, err)
			}
			if strings.Contains(err.Error()+stderr.String(), plaintext[:7]) {
				t.Errorf("the password is in the error or the log: %v\n%s", err, stderr.String())
			}
		})
	}
}

// startTelemetry runs the daemon with the metrics listener opts asks for,
// as Run builds it (wiring.NewDaemon), over a fake pool, and returns the
// listener's address and what the daemon logged.
func startTelemetry(t *testing.T, opts options) (string, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	daemon := wiringtest.New(t).ServeDaemon(daemonOptions(opts, log))
	return daemon.MetricsAddress(), logs
}

// scrape GETs url with basic auth (none when user is empty) and returns the
// status and body; a refused connection or handshake is status 0.
func scrape(t *testing.T, client *http.Client, url, user, password string) (int, string) {
	t.Helper()
	request, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		request.SetBasicAuth(user, password)
	}
	response, err := client.Do(request)
	if err != nil {
		return 0, err.Error()
	}
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response.StatusCode, string(body)
}

// writeSelfSignedCertificate writes a certificate for localhost and
// 127.0.0.1 and its key into dir, and returns a pool that trusts it.
func writeSelfSignedCertificate(t *testing.T, dir, certName, keyName string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, certName), certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, keyName), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	return roots
}

func writeWebConfig(t *testing.T, dir, content string) string {
	t.Helper()
	path := filepath.Join(dir, "web-config.yml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func bcryptHash(t *testing.T, password string) string {
	t.Helper()
	// The lowest cost: the test checks who gets in, not how slow guessing is.
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(hash)
}
