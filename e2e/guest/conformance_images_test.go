package guest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// unbuiltImages runs conformance.sh's conf_unbuilt_images on a planted
// k8s.io/kubernetes source tree of the given files (path → Go source).
func unbuiltImages(t *testing.T, files map[string]string) (string, error) {
	t.Helper()
	src := t.TempDir()
	for path, text := range files {
		full := filepath.Join(src, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := `die() { echo "die: $*"; exit 1; }
source <(sed -n '/^CONF_IMAGE_DIRS=/,/^}/p' ../k8s/conformance.sh)
conf_unbuilt_images "$1"`
	out, err := exec.Command("bash", "-c", script, "bash", src).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// The images of v1.37.2's manifest that the cases name, as it writes them.
const imageManifest = `package image
func initImageConfigs(list RegistryList) (map[ImageID]Config, map[ImageID]Config) {
	configs := map[ImageID]Config{}
	configs[Agnhost] = Config{list.PromoterE2eRegistry, "agnhost", "2.66.1"}
	configs[BusyBox] = Config{list.PromoterE2eRegistry, "busybox", "1.37.0-2"}
	configs[GlibcDnsTesting] = Config{list.PromoterE2eRegistry, "glibc-dns-testing", "2.1.1"}
	configs[Kitten] = Config{list.PromoterE2eRegistry, "kitten", "1.8"}
	configs[NFSProvisioner] = Config{list.SigStorageRegistry, "nfs-provisioner", "v4.0.8"}
	configs[Nginx] = Config{list.PromoterE2eRegistry, "nginx", "1.27.0-2"}
	configs[VolumeNFSServer] = Config{list.PromoterE2eRegistry, "volume/nfs", "1.6.0"}
	return configs, nil
}
`

// A suite's source tree: its image manifest, each directory the check
// reads, and uses of images in them.
func suiteSources(uses map[string]string) map[string]string {
	files := map[string]string{"test/utils/image/manifest.go": imageManifest}
	for _, dir := range []string{"test/e2e/storage/testsuites", "test/e2e/storage/utils", "test/e2e/storage/framework",
		"test/e2e/storage/external", "test/e2e/framework/pod", "test/e2e/framework/volume"} {
		files[dir+"/doc.go"] = "package x\n"
	}
	for path, text := range uses {
		files[path] = "package x\n\nvar _ = " + text + "\n"
	}
	return files
}

// Every image the External Storage suite's sources name has a stand-in the
// harness builds or a reason it is not run, so that a release renaming one
// stops the run before the guests boot, naming the image.
func TestTheConformanceRunHasAStandInForEveryImageTheSuiteNames(t *testing.T) {
	v137 := map[string]string{
		"test/e2e/storage/testsuites/multivolume.go": "imageutils.GetE2EImage(imageutils.GlibcDnsTesting)",
		"test/e2e/storage/testsuites/volumes.go":     "imageutils.GetE2EImage(imageutils.Nginx)",
		"test/e2e/storage/testsuites/subpath.go":     "imageutils.GetE2EImage(imageutils.Agnhost)",
		"test/e2e/storage/utils/utils.go":            "[]imageutils.ImageID{imageutils.BusyBox, imageutils.NFSProvisioner}",
		"test/e2e/framework/volume/fixtures.go":      "imageutils.GetE2EImage(imageutils.VolumeNFSServer)",
		// Outside the suite's directories: not the suite's image.
		"test/e2e/apps/kitten.go": "imageutils.GetE2EImage(imageutils.Kitten)",
	}
	for _, c := range []struct {
		name, want string
		uses       map[string]string
		fails      bool
	}{
		{name: "v1.37.2's images, glibc-dns-testing among them", uses: v137},
		{name: "an image with no stand-in", uses: map[string]string{
			"test/e2e/storage/testsuites/new.go": "imageutils.GetE2EImage(imageutils.Kitten)",
		}, want: "kitten (imageutils.Kitten, named in test/e2e/storage/testsuites/new.go)"},
		{name: "an image named through the framework", uses: map[string]string{
			"test/e2e/framework/pod/create.go": "imageutils.GetE2EImage(imageutils.Kitten)",
		}, want: "kitten (imageutils.Kitten, named in test/e2e/framework/pod/create.go)"},
		{name: "a directory the suite no longer has", fails: true, want: "die: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := suiteSources(c.uses)
			if c.fails {
				delete(files, "test/e2e/storage/external/doc.go")
			}
			out, err := unbuiltImages(t, files)
			if (err != nil) != c.fails {
				t.Fatalf("err %v, want failure %v: %s", err, c.fails, out)
			}
			if c.fails {
				if !strings.HasPrefix(out, c.want) || !strings.Contains(out, "test/e2e/storage/external: the suite's sources moved") {
					t.Errorf("got %q, want the moved directory named", out)
				}
				return
			}
			if out != c.want {
				t.Errorf("got %q, want %q", out, c.want)
			}
		})
	}
}
