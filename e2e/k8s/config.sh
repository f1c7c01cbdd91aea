# shellcheck shell=bash
# Constants of the Kubernetes harness (make e2e-k8s): versions and cache paths.
# Sourced by the scripts in e2e/k8s; nothing here has side effects.

# Kubernetes' own binaries, built from the Go module k8s.io/kubernetes.
K8S_VERSION="${K8S_VERSION:-v1.34.4}"
K8S_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

# Everything built for the cluster is cached here, outside the repo.
K8S_CACHE="${ZFS_CSI_E2E_CACHE:-${HOME:-/root}/.cache/zfs-csi-e2e}/k8s"

# The images the cluster needs besides the sidecars the shipped manifests pin
# (build-images.sh reads those from packaging/kubernetes/30-sidecars.yaml).
# The sandbox image is containerd's sandbox_image; the workload image is
# busybox-static from Debian under a name no registry serves.
PAUSE_IMAGE=registry.k8s.io/pause:3.10
WORKLOAD_IMAGE=zfs-csi.e2e/busybox:debian

# snapshot_controller_image TAG: the cluster's snapshot-controller, at the
# version of the csi-snapshotter the manifests pin.
snapshot_controller_image() { echo "registry.k8s.io/sig-storage/snapshot-controller:$1"; }
