# A raw block zvol: the task sees a device node, not a filesystem.
#
#   sed "s/@NODE@/$NODE/" volume-block.hcl | nomad volume create -
id        = "vm-disk"
name      = "vm-disk"
type      = "csi"
plugin_id = "zfs.csi.dev"

capacity_min = "8GiB"
capacity_max = "8GiB"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "block-device"
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
  # Thin: no reservation, the zvol takes pool space only as it is written.
  thin         = "true"
  volblocksize = "16384"
}
