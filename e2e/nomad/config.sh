# shellcheck shell=bash
# Constants of the Nomad harness (make e2e-nomad): versions and cache paths.
# Sourced by the scripts in e2e/nomad; nothing here has side effects.

# Nomad, built from the Go module github.com/hashicorp/nomad. Its go.mod
# replaces the api module with ./api, which the module zip lacks, and the proxy
# does not serve the api at the release's own commit: the build requires
# NOMAD_API_VERSION (the proxy's latest api) instead.
NOMAD_VERSION="${NOMAD_VERSION:-v1.11.3}"
NOMAD_API_VERSION="${NOMAD_API_VERSION:-v0.0.0-20261016150620-df630b26e78a}"

# Everything built for the cluster is cached here, outside the repo.
NOMAD_CACHE="${ZFS_CSI_E2E_CACHE:-${HOME:-/root}/.cache/zfs-csi-e2e}/nomad"
