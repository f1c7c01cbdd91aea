# client.hcl — zfs-csi's part of a Nomad client's configuration. Copy it into
# the agent's configuration directory (/etc/nomad.d/ for the distribution
# packages) on every client that runs the zfs-csi daemon and
# zfs-csi-nomad.service, and restart the agent; Nomad merges it with the rest
# of the client block.
#
# The plugin job (zfs-csi.nomad.hcl) runs only on clients with this mark: a
# client without zfs-csi gets no plugin instance. It is a mark, nothing more:
# no host volume, no driver option. The daemon's socket stays out of every
# job's reach.
client {
  meta {
    zfs_csi = "true"
  }
}
