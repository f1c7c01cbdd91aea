# client.hcl — zfs-csi's part of a Nomad client's configuration. Copy it into
# the agent's configuration directory (/etc/nomad.d/ for the distribution
# packages) on every client that runs the zfs-csi daemon, and restart the
# agent; Nomad merges it with the rest of the client block.
#
# The host volume "zfs-csi" is the daemon's socket directory. The plugin jobs
# (zfs-csi.nomad.hcl, zfs-csi-raw-exec.nomad.hcl) ask for it, so Nomad places
# them only on clients that declare it: a client without zfs-csi gets no
# plugin instance. zfs-csi.nomad.hcl mounts it into its bridge task. If
# the daemon's CSI_ENDPOINT is not the default, point path at its directory.
client {
  host_volume "zfs-csi" {
    path      = "/run/zfs-csi"
    read_only = false
  }
}
