package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestHelpListsEveryOperatorCommand(t *testing.T) {
	var out bytes.Buffer
	writeHelp(&out)
	for _, name := range []string{"ctl", "doctor", "help", "snapshots", "status", "volumes"} {
		if !strings.Contains(out.String(), "\n  "+name+" ") {
			t.Errorf("help does not list %s:\n%s", name, out.String())
		}
	}
}
