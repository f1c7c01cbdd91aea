package daemon

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/config"
	"go.yaml.in/yaml/v3"
)

// The "Scraping from off the host" section of docs/monitoring.md is what an
// operator copies: each command there runs here as it is written, in a
// temporary directory that stands for /etc/zfs-csi, and the Prometheus
// configuration shown there scrapes the listener through Prometheus' own
// HTTP client code.
//
// long: runs the monitoring doc's commands in the doc's order
func TestScrapingFromOffTheHostWorksAsWritten(t *testing.T) {
	blocks := docBlocks(t, "../../docs/monitoring.md", "## Scraping from off the host")
	if got := blockLanguages(blocks); got != "sh conf sh yaml" {
		t.Fatalf("the section's code blocks are %q, want sh conf sh yaml (commands, settings, checks, scrape config): update this test with the document", got)
	}
	makeFiles, settings, check, scrapeConfig := blocks[0].text, blocks[1].text, blocks[2].text, blocks[3].text
	etc := t.TempDir()
	runShell(t, etc, nil, makeFiles)

	documented := map[string]string{}
	for line := range strings.Lines(settings) {
		name, value, _ := strings.Cut(strings.TrimSpace(line), "=")
		documented[name] = value
		// The daemon checks the web configuration file at start: the one
		// the commands made, in the directory that stands for /etc/zfs-csi.
		t.Setenv(name, strings.Replace(value, "/etc/zfs-csi/", etc+"/", 1))
	}
	opts, err := parseOptions("test", []string{"--parent-dataset", "tank/csi", "--node-id", "node-1"}, io.Discard)
	if err != nil {
		t.Fatalf("the daemon refuses the document's settings: %v", err)
	}
	address, webConfig := documented["ZFS_CSI_METRICS_ADDRESS"], documented["ZFS_CSI_METRICS_WEB_CONFIG"]
	if address != "0.0.0.0:9820" || filepath.Dir(webConfig) != "/etc/zfs-csi" || opts.metricsAddress != address {
		t.Errorf("the settings give --metrics-address %q and --metrics-web-config %q; the section's text speaks of 0.0.0.0:9820 and /etc/zfs-csi",
			address, webConfig)
	}
	// The listener as those settings make it, on loopback rather than every
	// interface of the machine running the test.
	listener, _ := startTelemetry(t, options{metricsAddress: "127.0.0.1:0", metricsWebConfig: opts.metricsWebConfig})

	t.Run("the checks on the host get 401 without the password and the metrics with it", func(t *testing.T) {
		// curl reads its configuration file before its arguments: it sends
		// localhost:9820 to the test's listener, the command stays as written.
		curlHome := t.TempDir()
		curlrc := "connect-to = localhost:9820:" + listener + "\n"
		if err := os.WriteFile(filepath.Join(curlHome, ".curlrc"), []byte(curlrc), 0o600); err != nil {
			t.Fatal(err)
		}
		output := runShell(t, etc, []string{"CURL_HOME=" + curlHome}, check)
		if !regexp.MustCompile(`(?m)^401\n(?s:.*)^zfs_csi_build_info\{`).MatchString(output) {
			t.Errorf("the checks printed:\n%s\nwant 401, then zfs_csi_build_info", output)
		}
	})
	t.Run("Prometheus scrapes with the scrape_configs entry", func(t *testing.T) {
		var prometheus struct {
			ScrapeConfigs []yaml.Node `yaml:"scrape_configs"`
		}
		if err := yaml.Unmarshal([]byte(scrapeConfig), &prometheus); err != nil || len(prometheus.ScrapeConfigs) != 1 {
			t.Fatalf("the scrape config does not parse to one entry: %v", err)
		}
		var job struct {
			JobName string `yaml:"job_name"`
			Scheme  string `yaml:"scheme"`
		}
		var client config.HTTPClientConfig
		if err := prometheus.ScrapeConfigs[0].Decode(&job); err != nil {
			t.Fatal(err)
		}
		if err := prometheus.ScrapeConfigs[0].Decode(&client); err != nil {
			t.Fatal(err)
		}
		if job.JobName != "zfs-csi" || job.Scheme != "https" {
			t.Errorf("job_name %q, scheme %q; want zfs-csi (the alert rules' job) and https", job.JobName, job.Scheme)
		}
		// Beside prometheus.yml, as the document says: this host's certificate
		// as the list of hosts' certificates, and the password.
		prometheusDir := t.TempDir()
		copyFile(t, filepath.Join(etc, "metrics.crt"), filepath.Join(prometheusDir, client.TLSConfig.CAFile))
		copyFile(t, filepath.Join(etc, "prometheus.password"), filepath.Join(prometheusDir, client.BasicAuth.PasswordFile))
		client.SetDirectory(prometheusDir)
		httpClient, err := config.NewClientFromConfig(client, "zfs-csi", config.WithDialContextFunc(
			func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, listener)
			}))
		if err != nil {
			t.Fatal(err)
		}
		// The target by its host name, the name the commands put in the certificate.
		hostname, err := os.Hostname()
		if err != nil {
			t.Fatal(err)
		}
		status, body := scrape(t, httpClient, job.Scheme+"://"+hostname+":9820/metrics", "", "")
		if status != http.StatusOK || !strings.Contains(body, "zfs_csi_build_info") {
			t.Errorf("Prometheus' client got %d:\n%.300s", status, body)
		}
	})
}

type docBlock struct{ language, text string }

// docBlocks returns the fenced code blocks of the Markdown section of path
// under the heading line, up to the next heading of the same or a higher
// level.
func docBlocks(t *testing.T, path, heading string) []docBlock {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(doc), "\n"+heading+"\n")
	if !found {
		t.Fatalf("%s has no section %q", path, heading)
	}
	level, _, _ := strings.Cut(heading, " ")
	for _, end := range []string{"\n# ", "\n## ", "\n### "}[:len(level)] {
		section, _, _ = strings.Cut(section, end)
	}
	var blocks []docBlock
	for _, match := range regexp.MustCompile("(?ms)^```(\\w*)\n(.*?)^```$").FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, docBlock{language: match[1], text: match[2]})
	}
	return blocks
}

func blockLanguages(blocks []docBlock) string {
	var languages []string
	for _, block := range blocks {
		languages = append(languages, block.language)
	}
	return strings.Join(languages, " ")
}

// runShell runs script with bash, stopping at the first failing command as
// an operator would notice it, and returns its standard output. Proxies are
// left out: the script talks to this machine only.
func runShell(t *testing.T, dir string, env []string, script string) string {
	t.Helper()
	command := exec.Command("bash", "-e", "-o", "pipefail", "-c", script)
	command.Dir = dir
	for _, variable := range os.Environ() {
		if name, _, _ := strings.Cut(variable, "="); !strings.HasSuffix(strings.ToLower(name), "_proxy") {
			command.Env = append(command.Env, variable)
		}
	}
	command.Env = append(command.Env, env...)
	var stderr strings.Builder
	command.Stderr = &stderr
	output, err := command.Output()
	if err != nil {
		t.Fatalf("%v\n%s\nstdout:\n%s\nstderr:\n%s", err, script, output, stderr.String())
	}
	return string(output)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	content, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, content, 0o600); err != nil {
		t.Fatal(err)
	}
}
