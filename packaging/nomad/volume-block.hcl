# A raw block zvol: the task sees a device node, not a filesystem.
#
#   nomad volume create volume-block.hcl
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
        "zfs.csi.dev/node" = "host-1"
      }
    }
  }
}

parameters {
  # Thin: no reservation, the zvol takes pool space only as it is written.
  thin         = "true"
  volblocksize = "16384"
}
