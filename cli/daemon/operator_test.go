package daemon

import (
	"errors"
	"strings"
	"testing"

	"github.com/zfs-csi/zfs-csi/cli/envflag"
)

func TestTheOperatorsSocketIsRefusedWhereAnOrchestratorReaches(t *testing.T) {
	roots := []string{"/var/lib/kubelet", "/var/lib/nomad"}
	tests := []struct {
		name             string
		endpoint, socket string
		refused          bool
	}{
		{"beside the CSI socket in /run", "unix:///run/zfs-csi/csi.sock", "", false},
		{"given in /run", "unix:///run/zfs-csi/csi.sock", "unix:///run/zfs-csi-operator/op.sock", false},
		{"in kubelet's plugin directory", "unix:///run/zfs-csi/csi.sock", "unix:///var/lib/kubelet/plugins/zfs.csi.dev/op.sock", true},
		{"beside a CSI socket in Nomad's directory", "unix:///var/lib/nomad/csi.sock", "", true},
		{"in Nomad's client directory", "unix:///run/zfs-csi/csi.sock", "unix:///var/lib/nomad/client/csi/op.sock", true},
		{"beside kubelet's directory, not in it", "unix:///run/zfs-csi/csi.sock", "unix:///var/lib/kubelet-operator.sock", false},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			err := checkOperatorSocket(test.endpoint, test.socket, roots)
			var config envflag.ConfigError
			if refused := errors.As(err, &config); refused != test.refused {
				t.Errorf("checkOperatorSocket: %v, want refused %v (a configuration error)", err, test.refused)
			}
		})
	}
}

func TestTheDaemonStopsWithItsOperatorsSocketInKubeletsDirectory(t *testing.T) {
	var stderr strings.Builder
	_, err := parseOptions("test", []string{"--parent-dataset", "tank/csi", "--node-id", "node-a",
		"--operator-socket", "unix:///var/lib/kubelet/plugins/zfs.csi.dev/operator.sock"}, &stderr)
	var config envflag.ConfigError
	if !errors.As(err, &config) || !strings.Contains(err.Error(), "where an orchestrator reaches") {
		t.Errorf("parseOptions: %v, want a configuration error naming the operator's socket", err)
	}
}
