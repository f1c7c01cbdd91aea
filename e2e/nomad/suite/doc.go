// Package suite holds the scenarios of make e2e-nomad: a Go test binary that
// runs on one host of a two-client Nomad cluster (two ZFS guests, each with
// its own zfs-csi daemon) and checks what a Nomad user of zfs-csi sees: the
// shipped plugin job healthy on every client, controller calls reaching the
// volume's node whichever instance Nomad picks, jobs placed on their
// volume's node keeping their data, snapshots, restores, expansion, the
// peer channel across nodes (restores, moves, what it refuses, a CA
// rotated), adoption, restarts and nothing left behind. It drives the nomad CLI and reads ZFS directly;
// the environment (ZFS_CSI_E2E_*) comes from e2e/guest/nomad/suite.sh.
package suite
