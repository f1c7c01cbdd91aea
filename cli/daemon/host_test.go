package daemon

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/zfs-csi/zfs-csi/cli/envflag"
)

func TestTheDefaultFileDocumentsEveryDaemonVariable(t *testing.T) {
	var usage bytes.Buffer
	if _, err := parseOptions("test", []string{"-h"}, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseOptions(-h) = %v", err)
	}
	variables := regexp.MustCompile(`\[((?:ZFS_CSI|CSI)_[A-Z_]+)`).FindAllStringSubmatch(usage.String(), -1)
	if len(variables) < 5 {
		t.Fatalf("found only %d variables in the usage text:\n%s", len(variables), usage.String())
	}
	defaults, err := os.ReadFile("../../packaging/default/zfs-csi")
	if err != nil {
		t.Fatal(err)
	}
	for _, variable := range variables {
		name := variable[1]
		t.Run(name+" is in packaging/default/zfs-csi", func(t *testing.T) {
			if !regexp.MustCompile(`(?m)^#?` + name + `=`).Match(defaults) {
				t.Errorf("packaging/default/zfs-csi has no line %q=…: document the option there (commented, with its default)", name)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"a configuration error exits 78 so that systemd does not restart", envflag.ConfigError{Err: errors.New("no parent dataset")}, 78},
		{"a wrapped configuration error still exits 78", fmt.Errorf("start: %w", envflag.ConfigError{Err: errors.New("bad")}), 78},
		{"any other error exits 1 and systemd retries", errors.New("pool tank is FAULTED"), 1},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if got := ExitCode(test.err); got != test.want {
				t.Errorf("ExitCode = %d, want %d", got, test.want)
			}
		})
	}
}
