# zfs-csi-raw-exec.nomad.hcl — the fallback of zfs-csi.nomad.hcl for clients
# without the exec driver: the same bridge under raw_exec.
#
# The bridge runs under raw_exec: as the agent's user (root), without
# isolation. Once a client enables raw_exec, every job submitter may use it,
# so restrict it (a Nomad namespace for this job whose capabilities enable
# raw_exec, disabled in the others, and ACLs on who submits there), or use
# zfs-csi.nomad.hcl. README.md, "Nomad", compares them.
#
# Needs on each client: the zfs-csi package, configured and running
# (systemctl status zfs-csi), client.hcl's host volume (the job is placed
# only on clients that declare it), and the raw_exec driver enabled:
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
    # The daemon's socket directory, declared by client.hcl. raw_exec mounts
    # nothing (the bridge reaches the socket on the host), but Nomad places
    # the group only on clients that have the volume: a client without
    # zfs-csi gets no instance of the plugin.
    volume "socket" {
      type      = "host"
      source    = "zfs-csi"
      read_only = true
    }

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
