# A ZFS dataset volume: refquota is the size, mounted directly (fs_type zfs).
#
#   sed "s/@NODE@/$NODE/" volume-dataset.hcl | nomad volume create -
#
# Volumes are node-local. topology_request pins the volume to one client:
# @NODE@ stands for that host's ZFS_CSI_NODE_ID (its hostname by default),
# which the sed above fills in from $NODE; Nomad then places the jobs that claim it on that client. Nomad
# sends the create to any client running the plugin; one that is not the
# requested node refuses with an error Nomad treats as retryable, and Nomad
# tries the next client, so the command succeeds the first time (see the
# README, "Nomad"). Without topology_request the volume is made on whichever
# client Nomad asked.
id        = "pg-data"
name      = "pg-data"
type      = "csi"
plugin_id = "zfs.csi.dev"

capacity_min = "10GiB"
capacity_max = "10GiB"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

mount_options {
  fs_type = "zfs"
}

topology_request {
  required {
    topology {
      segments {
        "zfs.csi.dev/node" = "@NODE@"
      }
    }
  }
}

parameters {
  "zfs.compression" = "lz4"
  "zfs.recordsize"  = "16384"
}
