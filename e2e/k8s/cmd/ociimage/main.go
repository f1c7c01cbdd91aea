// Command ociimage writes a single-layer container image as a docker-archive
// tarball (what `ctr images import` and `docker load` read), so the e2e-k8s
// cluster gets its images without a registry:
//
//	ociimage -o out.tar -name registry.k8s.io/sig-storage/csi-resizer:v2.3.0 \
//	  -entrypoint /csi-resizer /csi-resizer=out/csi-resizer
//
// Each FILE argument is DEST=SRC (a file copied into the layer, mode kept) or
// DEST->TARGET (a symlink). -link-applets BUSYBOX makes /bin/<applet> links to
// /bin/busybox for every applet the given busybox lists, except where a FILE
// argument names that path (a real program in place of the applet).
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"time"
)

// entry is one file or symlink of the layer.
type entry struct {
	dest, src, link string
}

func main() {
	out := flag.String("o", "", "output tarball")
	name := flag.String("name", "", "image reference, e.g. registry.k8s.io/pause:3.10")
	ep := flag.String("entrypoint", "", "entrypoint, space-separated")
	applets := flag.String("link-applets", "", "busybox binary whose applets get /bin links")
	flag.Parse()
	if *out == "" || *name == "" {
		fail(fmt.Errorf("-o and -name are required"))
	}
	var entries []entry
	for _, a := range flag.Args() {
		if d, t, ok := strings.Cut(a, "->"); ok {
			entries = append(entries, entry{dest: d, link: t})
			continue
		}
		d, s, ok := strings.Cut(a, "=")
		if !ok {
			fail(fmt.Errorf("file %q: want DEST=SRC or DEST->TARGET", a))
		}
		entries = append(entries, entry{dest: d, src: s})
	}
	if *applets != "" {
		links, err := busyboxApplets(*applets)
		if err != nil {
			fail(err)
		}
		entries = withApplets(entries, links)
	}
	if err := write(*out, *name, strings.Fields(*ep), entries); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ociimage:", err)
	os.Exit(1)
}

// busyboxApplets lists the applets of the busybox at bin as /bin symlinks.
func busyboxApplets(bin string) ([]entry, error) {
	outb, err := exec.Command(bin, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", bin, err)
	}
	var links []entry
	for _, a := range strings.Fields(string(outb)) {
		if a != "busybox" {
			links = append(links, entry{dest: "/bin/" + a, link: "busybox"})
		}
	}
	return links, nil
}

// withApplets adds the applet links to entries, except where an entry
// already names the path.
func withApplets(entries, links []entry) []entry {
	given := map[string]bool{}
	for _, e := range entries {
		given[path.Clean(e.dest)] = true
	}
	for _, link := range links {
		if !given[link.dest] {
			entries = append(entries, link)
		}
	}
	return entries
}

// layer builds the uncompressed layer tar: parent directories first, then the
// entries in name order, all owned by root, with a fixed time (reproducible).
func layer(entries []entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(0, 0)
	dirs := map[string]bool{}
	sort.Slice(entries, func(i, j int) bool { return entries[i].dest < entries[j].dest })
	for _, d := range []string{"tmp", "etc", "dev", "proc", "sys"} {
		dirs[d] = true
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, ModTime: mtime}); err != nil {
			return nil, err
		}
	}
	for _, e := range entries {
		name := strings.TrimPrefix(path.Clean(e.dest), "/")
		var parents []string
		for p := path.Dir(name); p != "." && !dirs[p]; p = path.Dir(p) {
			parents = append([]string{p}, parents...)
		}
		for _, p := range parents {
			dirs[p] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: 0o755, ModTime: mtime}); err != nil {
				return nil, err
			}
		}
		if e.link != "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: e.link, Mode: 0o777, ModTime: mtime}); err != nil {
				return nil, err
			}
			continue
		}
		data, err := os.ReadFile(e.src)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(e.src)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(st.Mode().Perm()), Size: int64(len(data)), ModTime: mtime}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// write assembles the docker-archive: the layer, its image config, and
// manifest.json naming the image.
func write(out, name string, entrypoint []string, entries []entry) error {
	lay, err := layer(entries)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(lay)
	diffID := "sha256:" + hex.EncodeToString(sum[:])
	cfg, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      time.Unix(0, 0).UTC().Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": entrypoint,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	if err != nil {
		return err
	}
	csum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(csum[:]) + ".json"
	layName := hex.EncodeToString(sum[:]) + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": cfgName, "RepoTags": []string{name}, "Layers": []string{layName},
	}})
	if err != nil {
		return err
	}
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(out + ".tmp")
	tw := tar.NewWriter(f)
	for _, file := range []struct {
		name string
		data []byte
	}{{cfgName, cfg}, {layName, lay}, {"manifest.json", manifest}} {
		if dir := path.Dir(file.name); dir != "." {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: file.name, Mode: 0o644, Size: int64(len(file.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := io.Copy(tw, bytes.NewReader(file.data)); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(out+".tmp", out)
}
