package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// A program given for a path an applet would link (GNU dd for busybox's dd)
// is what the layer holds there, once.
func TestAGivenFileTakesTheAppletsPlace(t *testing.T) {
	dd := filepath.Join(t.TempDir(), "dd")
	if err := os.WriteFile(dd, []byte("gnu dd"), 0o755); err != nil {
		t.Fatal(err)
	}
	entries := withApplets([]entry{{dest: "/bin/busybox", src: dd}, {dest: "/bin/dd", src: dd}},
		[]entry{{dest: "/bin/dd", link: "busybox"}, {dest: "/bin/sha256sum", link: "busybox"}})
	data, err := layer(entries)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]*tar.Header{}
	r := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if found[h.Name] != nil {
			t.Errorf("%s twice in the layer", h.Name)
		}
		found[h.Name] = h
	}
	if h := found["bin/dd"]; h == nil || h.Typeflag != tar.TypeReg {
		t.Errorf("bin/dd is %+v, want the given file", h)
	}
	if h := found["bin/sha256sum"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
		t.Errorf("bin/sha256sum is %+v, want the applet link", h)
	}
}
