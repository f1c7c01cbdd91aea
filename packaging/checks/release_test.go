package checks

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// release is the directory make release filled, and what it was made for.
type release struct {
	dir, version string
	arches       []string
}

// rpmArch is RPM's name of a Debian architecture.
var rpmArch = map[string]string{"amd64": "x86_64", "arm64": "aarch64"}

func (r release) debs() (names []string) {
	for _, arch := range r.arches {
		names = append(names, "zfs-csi_"+r.version+"-1_"+arch+".deb")
	}
	return names
}

func (r release) rpms() (names []string) {
	for _, arch := range r.arches {
		names = append(names, "zfs-csi-"+r.version+"-1."+rpmArch[arch]+".rpm")
	}
	return names
}

func (r release) chart() string { return "zfs-csi-" + r.version + ".tgz" }
func (r release) sbom() string  { return "zfs-csi-" + r.version + ".spdx.json" }

// installedChart is where every package puts the chart.
func (r release) installedChart() string { return "/usr/share/zfs-csi/helm/" + r.chart() }

// What make release leaves in dist/ (RELEASE_DIR; make release runs this
// test last and fails when it fails): the packages of each architecture,
// the chart, the SBOM and SHA256SUMS, and nothing else; the sums hold;
// every package carries the chart; the SBOM names the binary of each; and
// docs/release.md's commands work as written on these files.
//
// long: subtests on one shared fixture, one behaviour each
func TestRelease(t *testing.T) {
	dir := os.Getenv("RELEASE_DIR")
	if dir == "" {
		t.Skip("make release runs this on the release it made (RELEASE_DIR, RELEASE_VERSION, RELEASE_ARCHES)")
	}
	r := release{dir: dir, version: os.Getenv("RELEASE_VERSION"), arches: strings.Fields(os.Getenv("RELEASE_ARCHES"))}
	if r.version == "" || len(r.arches) == 0 {
		t.Fatal("RELEASE_DIR without RELEASE_VERSION and RELEASE_ARCHES")
	}
	docs := releaseDocCommands(t)

	t.Run("dist holds the packages, the chart, the SBOM and SHA256SUMS only", func(t *testing.T) {
		want := append(append(r.debs(), r.rpms()...), r.chart(), r.sbom(), "SHA256SUMS")
		slices.Sort(want)
		if got := listDir(t, r.dir); !slices.Equal(got, want) {
			t.Errorf("dist holds %v, want %v", got, want)
		}
	})
	t.Run("SHA256SUMS names every other file with its sum", func(t *testing.T) {
		sums := readSums(t, filepath.Join(r.dir, "SHA256SUMS"))
		var named []string
		for name, sum := range sums {
			named = append(named, name)
			if got := fileSum(t, filepath.Join(r.dir, name)); got != sum {
				t.Errorf("%s: SHA256SUMS says %s, the file's is %s", name, sum, got)
			}
		}
		slices.Sort(named)
		want := slices.DeleteFunc(listDir(t, r.dir), func(name string) bool { return name == "SHA256SUMS" })
		if !slices.Equal(named, want) {
			t.Errorf("SHA256SUMS names %v, want %v", named, want)
		}
		// docs/release.md's check, as a user runs it in the download directory.
		out := runIn(t, r.dir, nil, docs.verify)
		if strings.Count(out, ": OK\n") != len(want) {
			t.Errorf("%s printed:\n%s", docs.verify, out)
		}
	})
	chart := readFile(t, filepath.Join(r.dir, r.chart()))
	t.Run("the chart is of the release's version", func(t *testing.T) {
		out, err := exec.Command(helmBinary(t), "show", "chart", filepath.Join(r.dir, r.chart())).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, field := range []string{"version", "appVersion"} {
			if !regexp.MustCompile(`(?m)^` + field + `: "?` + regexp.QuoteMeta(r.version) + `"?$`).Match(out) {
				t.Errorf("the chart's %s is not %s:\n%s", field, r.version, out)
			}
		}
	})
	var sbom struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			SPDXID      string `json:"SPDXID"`
			Name        string `json:"name"`
			VersionInfo string `json:"versionInfo"`
			Checksums   []struct {
				Algorithm, ChecksumValue string
			} `json:"checksums"`
		} `json:"packages"`
		Relationships []sbomRelationship `json:"relationships"`
	}
	if err := json.Unmarshal(readFile(t, filepath.Join(r.dir, r.sbom())), &sbom); err != nil || sbom.SPDXVersion != "SPDX-2.3" {
		t.Fatalf("%s is no SPDX 2.3 JSON document: %v", r.sbom(), err)
	}
	// describedBy is the SBOM's package of a binary, by its SHA-256.
	describedBy := map[string]string{}
	for _, pkg := range sbom.Packages {
		for _, sum := range pkg.Checksums {
			if pkg.Name == "zfs-csi" && pkg.VersionInfo == r.version && sum.Algorithm == "SHA256" {
				describedBy[sum.ChecksumValue] = pkg.SPDXID
			}
		}
	}
	for _, deb := range r.debs() {
		t.Run(deb, func(t *testing.T) {
			root := t.TempDir()
			if out, err := exec.Command("dpkg-deb", "-x", filepath.Join(r.dir, deb), root).CombinedOutput(); err != nil {
				t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
			}
			if !bytes.Equal(readFile(t, filepath.Join(root, r.installedChart())), chart) {
				t.Errorf("%s is not the release's chart", r.installedChart())
			}
			checkSBOMNames(t, filepath.Join(root, "usr/sbin/zfs-csi"), describedBy, sbom.Relationships)
			// docs/release.md's helm install, in a mount namespace whose
			// /usr/share is the package's: the chart where it is installed.
			out := runInstalled(t, root, docs.install)
			if !strings.Contains(out, "kind: DaemonSet") || !strings.Contains(out, "name: zfs-csi-sidecars") {
				t.Errorf("%s rendered no sidecars' DaemonSet:\n%.500s", docs.install, out)
			}
		})
	}
	for _, rpm := range r.rpms() {
		t.Run(rpm, func(t *testing.T) {
			root := t.TempDir()
			archive, err := exec.Command("rpm2cpio", filepath.Join(r.dir, rpm)).Output()
			if len(archive) == 0 { // Debian's rpm2cpio may exit 1 after the whole archive
				t.Fatalf("rpm2cpio: %v", err)
			}
			cpio := exec.Command("cpio", "-idm", "--quiet", "--no-absolute-filenames")
			cpio.Dir, cpio.Stdin = root, bytes.NewReader(archive)
			if out, err := cpio.CombinedOutput(); err != nil {
				t.Fatalf("cpio: %v\n%s", err, out)
			}
			if !bytes.Equal(readFile(t, filepath.Join(root, r.installedChart())), chart) {
				t.Errorf("%s is not the release's chart", r.installedChart())
			}
			checkSBOMNames(t, filepath.Join(root, "usr/sbin/zfs-csi"), describedBy, sbom.Relationships)
		})
	}
}

// sbomRelationship is an SPDX relationship as the SBOM's JSON has it.
type sbomRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

// checkSBOMNames checks that the SBOM has a package for binary (by its
// SHA-256) that depends on every module the binary links.
func checkSBOMNames(t *testing.T, binary string, describedBy map[string]string, relationships []sbomRelationship) {
	t.Helper()
	id, ok := describedBy[fileSum(t, binary)]
	if !ok {
		t.Fatalf("the SBOM has no package with the SHA-256 of this package's %s", filepath.Base(binary))
	}
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	dependsOn := 0
	for _, rel := range relationships {
		if rel.SPDXElementID == id && rel.RelationshipType == "DEPENDS_ON" {
			dependsOn++
		}
	}
	if want := len(info.Deps) + 1; dependsOn != want { // and the toolchain
		t.Errorf("the SBOM's %s depends on %d packages; the binary links %d modules and the Go standard library", id, dependsOn, len(info.Deps))
	}
}

// releaseDocs are the commands of docs/release.md's "Checking and
// installing a release", as a user copies them.
type releaseDocs struct{ verify, install string }

func releaseDocCommands(t *testing.T) releaseDocs {
	t.Helper()
	text := string(readFile(t, "../../docs/release.md"))
	_, section, ok := strings.Cut(text, "\n## Checking and installing a release\n")
	if !ok {
		t.Fatal("docs/release.md has no section Checking and installing a release")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks []string
	for _, match := range regexp.MustCompile("(?ms)^```sh\n(.*?)^```$").FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, strings.TrimSpace(match[1]))
	}
	if len(blocks) != 2 || !strings.HasPrefix(blocks[0], "sha256sum ") || !strings.HasPrefix(blocks[1], "helm install ") {
		t.Fatalf("docs/release.md's commands are %q; this test runs a sha256sum and a helm install: update it with the document", blocks)
	}
	return releaseDocs{verify: blocks[0], install: blocks[1]}
}

// runInstalled runs command with bash in a mount namespace of its own where
// /usr/share is root's (a package's files), with a helm first on PATH that
// renders what helm install would apply (testdata/helm-without-cluster.sh:
// helm template of the same arguments, through helmtool, on a cluster that
// serves clusterArgs' APIs); it returns what that printed.
func runInstalled(t *testing.T, root, command string, clusterArgs ...string) string {
	t.Helper()
	shim, err := filepath.Abs("testdata/helm-without-cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", shim).CombinedOutput(); err != nil {
		t.Fatalf("%s does not parse: %v\n%s", shim, err, out)
	}
	shims := t.TempDir()
	if err := os.Symlink(shim, filepath.Join(shims, "helm")); err != nil {
		t.Fatal(err)
	}
	script := "mount --bind " + shellQuote(filepath.Join(root, "usr/share")) + " /usr/share && exec bash -e -o pipefail -c " + shellQuote(command)
	env := []string{"PATH=" + shims + ":" + os.Getenv("PATH"), "HELMTOOL=" + helmBinary(t), "HELM_CLUSTER_ARGS=" + strings.Join(clusterArgs, " ")}
	return runIn(t, t.TempDir(), env, "exec unshare --mount bash -c "+shellQuote(script))
}

func runIn(t *testing.T, dir string, env []string, script string) string {
	t.Helper()
	cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	return string(out)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func readSums(t *testing.T, path string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	scanner := bufio.NewScanner(bytes.NewReader(readFile(t, path)))
	line := regexp.MustCompile(`^([0-9a-f]{64})  (\S+)$`)
	for scanner.Scan() {
		m := line.FindStringSubmatch(scanner.Text())
		if m == nil {
			t.Errorf("SHA256SUMS: %q is not SUM  NAME", scanner.Text())
			continue
		}
		if _, twice := sums[m[2]]; twice {
			t.Errorf("SHA256SUMS names %s twice", m[2])
		}
		sums[m[2]] = m[1]
	}
	return sums
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, entry := range entries {
		names = append(names, entry.Name())
	}
	return names // os.ReadDir sorts by name
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	sum := sha256.Sum256(readFile(t, path))
	return hex.EncodeToString(sum[:])
}
