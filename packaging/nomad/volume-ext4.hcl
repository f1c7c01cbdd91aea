# A zvol formatted with ext4 on first use (xfs and btrfs work the same way).
#
#   sed "s/@NODE@/$NODE/" volume-ext4.hcl | nomad volume create -
id        = "mysql-data"
name      = "mysql-data"
type      = "csi"
plugin_id = "zfs.csi.dev"

capacity_min = "20GiB"
capacity_max = "20GiB"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

mount_options {
  fs_type     = "ext4"
  mount_flags = ["noatime"]
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
