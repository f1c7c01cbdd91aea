package daemon

import (
	"errors"
	"testing"

	"github.com/zfs-csi/zfs-csi/cli/envflag"
)

func TestTheOperatorsSocketIsRefusedWhereAnOrchestratorReaches(t *testing.T) {
	roots := []string{"/var/lib/kubelet", "/var/lib/nomad", "/srv/volumes"}
	tests := []struct {
		name             string
		endpoint, socket string
		refused          bool
	}{
		{"beside the CSI socket in /run", "unix:///run/zfs-csi/csi.sock", "", false},
		{"given in /run", "unix:///run/zfs-csi/csi.sock", "unix:///run/zfs-csi-operator/op.sock", false},
		{"in kubelet's plugin directory", "unix:///run/zfs-csi/csi.sock", "unix:///var/lib/kubelet/plugins/zfs.csi.dev/op.sock", true},
		{"beside a CSI socket in Nomad's directory", "unix:///var/lib/nomad/csi.sock", "", true},
		{"in an allowed root", "unix:///run/zfs-csi/csi.sock", "unix:///srv/volumes/op.sock", true},
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
