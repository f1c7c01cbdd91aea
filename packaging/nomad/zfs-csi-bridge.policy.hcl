# zfs-csi-bridge.policy.hcl — the Nomad ACL policy of the token that
# zfs-csi-nomad.service uses (/etc/zfs-csi/nomad-token on each client, mode
# 0600). The bridge asks the local agent whose allocation each plugin socket
# directory is (GET /v1/allocation/<ID>): reading jobs in the plugin's
# namespace is all it needs. Nomad answers "not found" for an allocation in a
# namespace the token may not read, and the bridge refuses those too.
#
#   nomad acl policy apply -description "zfs-csi-nomad.service: reads the plugin job" zfs-csi-bridge zfs-csi-bridge.policy.hcl
#   nomad acl token create -name zfs-csi-bridge -policy zfs-csi-bridge -t '{{ .SecretID }}'
namespace "zfs-csi" {
  capabilities = ["read-job"]
}
