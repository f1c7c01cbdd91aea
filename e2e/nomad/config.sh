# shellcheck shell=bash
# Constants of the Nomad harness (make e2e-nomad): versions and cache paths.
# Sourced by the scripts in e2e/nomad; nothing here has side effects.
# The constants are read by those scripts: checked on its own, the file
# uses few of them.
# shellcheck disable=SC2034

# Nomad, built from the Go module github.com/hashicorp/nomad. Only its
# MPL-2.0 line may be used: v1.7.0 and later are under the BUSL, which this
# project does not accept anywhere (licence_test.go at the repository root
# fails on a later version here; build-nomad.sh refuses one before it
# downloads anything and checks the zip's LICENSE). The proxy serves v1.6.0
# to v1.6.3; v1.6.3 is the newest.
NOMAD_VERSION="${NOMAD_VERSION:-v1.6.3}"
# Its go.mod replaces the api module with ./api, which the module zip lacks,
# and requires the api at v0.0.0-20230103221135-ce00d683f9be, too old for
# v1.6.3's own code (jobspec, jobspec2 and lib/auth/oidc do not compile). The
# proxy does not serve the api at v1.6.3's commit; of the pseudo-versions it
# serves, the nearest before it (v0.0.0-20230718173136-3a687930bd3e, v1.6.0's)
# lacks PeriodicConfig.Specs and the latest (2026) lacks fields
# command/agent reads (JobsParseRequest.HCLv1, Job.ConsulToken, Job.VaultToken).
# The nearest after it builds unchanged. The api module is MPL-2.0 at every
# version (build-nomad.sh checks its LICENSE too).
NOMAD_API_VERSION="${NOMAD_API_VERSION:-v0.0.0-20231208134655-099ee06a607c}"

# Everything built for the cluster is cached here, outside the repo.
NOMAD_CACHE="${ZFS_CSI_E2E_CACHE:-${HOME:-/root}/.cache/zfs-csi-e2e}/nomad"
