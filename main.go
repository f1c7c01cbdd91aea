// Command zfs-csi is a CSI plugin that turns a host's ZFS pool into volumes
// for Kubernetes and Nomad: one binary for the daemon and the operator's
// tools. Its commands live in package cli; this file stays at the root so
// that `go install` names the binary zfs-csi.
package main

import (
	"os"

	"github.com/zfs-csi/zfs-csi/cli"
)

// version is stamped at build time: -ldflags "-X main.version=…".
var version = "dev"

func main() {
	os.Exit(cli.Main(version, os.Args[1:], os.Stdout, os.Stderr))
}
