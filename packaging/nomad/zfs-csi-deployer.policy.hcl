# zfs-csi-deployer.policy.hcl — a Nomad ACL policy for whoever runs the
# plugin job (zfs-csi.nomad.hcl) in its namespace "zfs-csi". Whoever may
# submit a job there can make the job that zfs-csi-nomad.service serves, and
# so controls every volume on every client: give this policy, and any other
# that grants submit-job, csi-register-plugin or write in namespace "zfs-csi",
# to the operators only.
#
# Everyone else needs nothing of this namespace: claiming and creating
# volumes happens in their own namespaces (csi-mount-volume,
# csi-write-volume, which the "write" policy of a namespace includes).
#
#   nomad acl policy apply -description "runs the zfs-csi plugin job" zfs-csi-deployer zfs-csi-deployer.policy.hcl
namespace "zfs-csi" {
  capabilities = ["submit-job", "read-job", "list-jobs", "csi-register-plugin", "read-logs"]
}

# nomad plugin status zfs.csi.dev
plugin {
  policy = "read"
}
