# zfs-csi.nomad.hcl — registers the zfs-csi daemon of every Nomad client as
# the CSI plugin "zfs.csi.dev" (controller and node in one: monolith).
#
# The daemon itself runs on each host under systemd (the zfs-csi package).
# Nomad registers CSI plugins only through a task's csi_plugin block, so this
# system job runs `zfs-csi nomad-bridge` on every client: it listens on the
# socket Nomad gives the task ($CSI_ENDPOINT) and forwards each connection to
# the daemon's socket, byte for byte. It runs under the exec driver;
# zfs-csi-raw-exec.nomad.hcl is the fallback for clients without exec.
#
# The bridge runs in a chroot of its own, isolated by namespaces, cgroups and
# exec's reduced capability set, and sees of the host only the daemon's
# socket directory (the host volume "zfs-csi") and Nomad's plugin
# directories. It must run as root in there: the daemon's socket is root's,
# and Nomad creates the plugin's socket directory for root only (0700).
# Nomad clients refuse root for exec tasks by default (client option
# "user.denylist" = "root,Administrator"): this job needs that list without
# root, which lets every exec job run as root inside exec's isolation. That
# is less than raw_exec gives every raw_exec job (root on the host, no
# isolation), and more than the default; README.md, "Nomad", compares them.
#
# Needs on each client: the zfs-csi package, configured and running
# (systemctl status zfs-csi), client.hcl's host volume, and
#   client { options { "user.denylist" = "Administrator" } }
#
#   nomad job run zfs-csi.nomad.hcl
#   nomad plugin status zfs.csi.dev
#
# Clients whose data_dir is not /opt/nomad/data:
#   nomad job run -var nomad_data_dir=/var/lib/nomad zfs-csi.nomad.hcl

variable "nomad_data_dir" {
  type        = string
  default     = "/opt/nomad/data"
  description = "The clients' data_dir. Nomad keeps its CSI staging and per-allocation mount points under <data_dir>/client/csi/monolith/<plugin id>."
}

job "zfs-csi" {
  type     = "system"
  priority = 90

  group "plugin" {
    # The daemon's socket directory, declared by client.hcl: clients without
    # it get no instance of the plugin.
    volume "socket" {
      type      = "host"
      source    = "zfs-csi"
      read_only = false
    }

    restart {
      attempts = 10
      interval = "5m"
      delay    = "10s"
      mode     = "delay"
    }

    task "bridge" {
      driver = "exec"
      # The daemon's socket is root's (mode 0600).
      user = "root"

      config {
        command = "/usr/sbin/zfs-csi"
        args    = ["nomad-bridge", "--target", "unix:///run/zfs-csi/csi.sock"]
      }

      volume_mount {
        volume      = "socket"
        destination = "/run/zfs-csi"
      }

      csi_plugin {
        id   = "zfs.csi.dev"
        type = "monolith"
        # Where Nomad puts the plugin's socket in the task: CSI_ENDPOINT,
        # which the bridge listens on.
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
