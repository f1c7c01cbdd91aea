// Package suite holds the scenarios of make e2e-k8s: a Go test binary that
// runs on the cluster's node (the ZFS guest) against a real apiserver, kubelet,
// containerd and the shipped sidecars, and checks what a Kubernetes user of
// zfs-csi sees: registration, the manifests applying unchanged, volumes of each
// StorageClass, snapshots, restores, clones, expansion, deletion with
// snapshots, and a daemon restart under writing pods. It reads ZFS and the
// mount table directly (it runs on the node) and talks to the cluster with
// client-go; the environment (ZFS_CSI_E2E_*) comes from e2e/guest/k8s/suite.sh.
package suite
