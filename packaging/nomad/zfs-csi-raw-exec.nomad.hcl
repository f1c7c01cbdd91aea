# zfs-csi-raw-exec.nomad.hcl — the fallback of zfs-csi.nomad.hcl for clients
# where the exec driver is not available: the same bridge under raw_exec.
#
# raw_exec runs tasks as the agent's user (root) without any isolation, and
# once a client enables it, every job submitter may use it: only enable it
# where submitters are trusted with root on the clients, or restrict it with
# ACLs. Prefer zfs-csi.nomad.hcl.
#
# Needs on each client: the zfs-csi package, configured and running
# (systemctl status zfs-csi), and the raw_exec driver enabled:
#   plugin "raw_exec" { config { enabled = true } }
#
#   nomad job run zfs-csi-raw-exec.nomad.hcl
#   nomad plugin status zfs.csi.dev
#
# Clients whose data_dir is not /opt/nomad/data:
#   nomad job run -var nomad_data_dir=/var/lib/nomad zfs-csi-raw-exec.nomad.hcl

variable "nomad_data_dir" {
  type        = string
  default     = "/opt/nomad/data"
  description = "The clients' data_dir. Nomad keeps its CSI staging and per-allocation mount points under <data_dir>/client/csi/monolith/<plugin id>."
}

variable "daemon_socket" {
  type        = string
  default     = "unix:///run/zfs-csi/csi.sock"
  description = "The daemon's CSI_ENDPOINT (see /etc/default/zfs-csi)."
}

job "zfs-csi" {
  type     = "system"
  priority = 90

  # Only where the host daemon can run.
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  group "plugin" {
    restart {
      attempts = 10
      interval = "5m"
      delay    = "10s"
      mode     = "delay"
    }

    task "bridge" {
      driver = "raw_exec"

      config {
        command = "/usr/sbin/zfs-csi"
        args    = ["nomad-bridge", "--target", var.daemon_socket]
      }

      csi_plugin {
        id   = "zfs.csi.dev"
        type = "monolith"
        # raw_exec has no filesystem isolation: Nomad ignores mount_dir and
        # passes the socket's host path in CSI_ENDPOINT, which the bridge
        # listens on.
        mount_dir = "/csi"
        # Nomad hands the plugin staging and target paths under this
        # directory and binds the same host paths into the tasks that use the
        # volumes. The daemon runs on the host, not in this task, so the two
        # must be one: the host directory Nomad uses for this plugin.
        stage_publish_base_dir = "${var.nomad_data_dir}/client/csi/monolith/zfs.csi.dev"
        # The bridge is ready as soon as the daemon answers Probe.
        health_timeout = "2m"
      }

      resources {
        cpu    = 50
        memory = 64
      }
    }
  }
}
