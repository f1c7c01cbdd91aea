package main

import (
	"os"
	"strings"
	"testing"
)

// The CSI livenessprobe sidecar listens on 9808 by convention: the metrics
// port the documentation and the packaged defaults suggest must be another.
func TestMetricsExamplesStayOffTheLivenessProbesPort(t *testing.T) {
	for _, path := range []string{"README.md", "packaging/default/zfs-csi"} {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(text), "9808") {
			t.Errorf("%s suggests port 9808, the livenessprobe's", path)
		}
		if !strings.Contains(string(text), "9820") {
			t.Errorf("%s no longer names the metrics port 9820", path)
		}
	}
}
