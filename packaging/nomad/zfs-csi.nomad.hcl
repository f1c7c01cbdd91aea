# zfs-csi.nomad.hcl — registers the zfs-csi daemon of every Nomad client as
# the CSI plugin "zfs.csi.dev" (controller and node in one: monolith).
#
# The daemon runs on each host under systemd (the zfs-csi package). Nomad
# registers CSI plugins only through a task's csi_plugin block: for each
# allocation of this job it makes a socket directory on the host,
# <data_dir>/client/csi/plugins/<alloc ID>/ (root's, 0700), and dials
# csi.sock in it. zfs-csi-nomad.service, on the host, asks the local agent
# whose allocation each such directory is and serves the daemon's socket
# there for this job's allocations only (this namespace, this job ID, this
# csi_plugin id). So the task below needs nothing: it runs `sleep` as nobody
# without capabilities under exec, and can neither reach the socket (its
# directory is root's) nor any other part of the host. No host volume exposes the daemon, and the
# clients keep Nomad's default refusal of root for exec tasks.
#
# Whoever may submit this job in its namespace controls the plugin, and so
# every volume on every client: keep submit-job and csi-register-plugin in
# namespace "zfs-csi" to the operators (zfs-csi-deployer.policy.hcl).
#
# Needs on each client: the zfs-csi package, configured and running,
# zfs-csi-nomad.service enabled with its token, and client.hcl. README.md,
# "Nomad", has the commands.
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
  # The bridge serves this namespace and job ID only (ZFS_CSI_NOMAD_NAMESPACE,
  # ZFS_CSI_NOMAD_JOB in /etc/default/zfs-csi).
  namespace = "zfs-csi"
  type      = "system"
  priority  = 90

  # Only on clients that run the daemon and its bridge (client.hcl).
  constraint {
    attribute = "${meta.zfs_csi}"
    value     = "true"
  }

  group "plugin" {
    restart {
      attempts = 10
      interval = "5m"
      delay    = "10s"
      mode     = "delay"
    }

    task "plugin" {
      driver = "exec"
      # Nomad's default for exec, said out loud: the task holds no privilege.
      user = "nobody"

      config {
        command = "/usr/bin/sleep"
        args    = ["infinity"]
        # exec hands its default capabilities (dac_override among them) to
        # tasks of any user, nobody included, as ambient capabilities: with
        # them this task could open the socket despite its 0600 mode
        # (Nomad 1.6.3's executor makes them ambient for every user but root;
        # make e2e-nomad checks the task's CapEff is 0). It needs none.
        cap_drop = ["all"]
      }

      csi_plugin {
        id   = "zfs.csi.dev"
        type = "monolith"
        # Nomad binds the allocation's socket directory here; the task does
        # not use it (it cannot enter it either).
        mount_dir = "/csi"
        # Nomad hands the plugin staging and target paths under this
        # directory and binds the same host paths into the tasks that use the
        # volumes. The daemon mounts on the host, not in this task, so the two
        # must be one: the host directory Nomad uses for this plugin.
        stage_publish_base_dir = "${var.nomad_data_dir}/client/csi/monolith/zfs.csi.dev"
        # Healthy once zfs-csi-nomad.service serves the allocation and the
        # daemon answers Probe.
        health_timeout = "2m"
      }

      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}
