# A volume restored from a snapshot: a ZFS clone, made at once, on the
# snapshot's node. Take the snapshot first:
#
#   nomad volume snapshot create pg-data nightly
#   nomad volume snapshot list -plugin zfs.csi.dev     # its ID: <node>:tank/csi/…@…
#   sed "s/@NODE@/$NODE/" volume-from-snapshot.hcl | nomad volume create -
#
# Put the ID the snapshot list shows in snapshot_id ("<node>:<dataset>@<snapshot>";
# the one below is only an example). On the snapshot's node the restore is a
# clone (parameters { sourceMode = "copy" } would make an independent copy
# with zfs send | zfs receive instead). With the daemons' peer channel
# configured (docs/across-nodes.md), a topology naming another node makes
# that node pull the snapshot over the channel: `nomad volume create` then
# answers "Aborted" with the progress until it is whole; run it again.
id        = "pg-data-restore"
name      = "pg-data-restore"
type      = "csi"
plugin_id = "zfs.csi.dev"

snapshot_id = "@NODE@:tank/csi/pg-data@nightly"

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
