# shellcheck shell=bash
# Constants of the Kubernetes harness (make e2e-k8s): versions and cache paths.
# Sourced by the scripts in e2e/k8s; nothing here has side effects.
# The constants are read by those scripts: checked on its own, the file
# uses few of them.
# shellcheck disable=SC2034

# Kubernetes' own binaries, built from the Go module k8s.io/kubernetes: any
# release the module proxy serves (measured: v1.34.4, v1.37.2). Everything
# built from it (binaries, e2e.test, ginkgo) is cached by this version; what
# depends on the minor version is decided by k8s_minor below, nowhere else.
K8S_VERSION="${K8S_VERSION:-v1.34.4}"
K8S_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

# mod_field MODULE@VERSION [FIELD] prints a field of `go mod download -json`
# for the module (Dir by default: where its source lies in the module
# cache), downloading it first if it is not there yet. Run from / so that no
# go.mod around the caller takes part.
mod_field() {
	(cd / && go mod download -json "$1") | sed -n "s/^\t\"${2:-Dir}\": \"\(.*\)\",\$/\1/p"
}

# k8s_minor prints the minor version of K8S_VERSION (v1.37.2 → 37), or fails
# on a version that is not v1.MINOR.PATCH (a pre-release suffix allowed).
k8s_minor() {
	[[ $K8S_VERSION =~ ^v1\.([0-9]+)\.[0-9]+(-[0-9A-Za-z.]+)?$ ]] || return 1
	echo "${BASH_REMATCH[1]}"
}

# k8s_mutating_policy_api prints the API version under which the cluster serves
# MutatingAdmissionPolicy (the group snapshot manifests' labelling policy):
# admissionregistration.k8s.io/v1 from 1.36 on, where it is GA and on by
# default; v1beta1 before, which the apiserver serves only when asked
# (cp_start turns it on).
k8s_mutating_policy_api() {
	local minor
	minor="$(k8s_minor)" || return 1
	if ((minor >= 36)); then
		echo admissionregistration.k8s.io/v1
	else
		echo admissionregistration.k8s.io/v1beta1
	fi
}

# The nodes' container runtime, built from the Go module proxy like the
# cluster's own binaries. Debian 12's containerd (1.6.20) is older than what
# any Kubernetes this harness runs supports: containerd's release matrix
# (RELEASES.md) asks 1.6.39 or later for 1.34, and no 1.x at all from 1.36.
# runc at the release containerd's own CI runs (its script/setup/runc-version).
# runtime_problems holds the pair to both before a guest boots.
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
RUNC_VERSION="${RUNC_VERSION:-v1.5.2}"

# version_ge A B succeeds when version A (v optional) is B or later.
version_ge() {
	[[ "$(printf '%s\n%s\n' "${2#v}" "${1#v}" | sort -V | sed -n 1p)" == "${2#v}" ]]
}

# runtime_problems SRC prints one line for each reason the containerd source
# tree SRC (CONTAINERD_VERSION's) and RUNC_VERSION do not run K8S_VERSION:
# containerd's RELEASES.md has no row for its minor, or the row's entries
# ("2.4.0+, 2.3.0+": the oldest patch of each line) leave CONTAINERD_VERSION
# out (a line the row lists, at a lower patch, or a line older than all of
# them), or runc is older than the release containerd's CI runs. Nothing
# printed: the pair supports that Kubernetes.
runtime_problems() {
	local src="$1" minor row entry line mine newest="" covered=""
	minor="$(k8s_minor)" || {
		echo "K8S_VERSION=$K8S_VERSION is not a Kubernetes release (v1.MINOR.PATCH)"
		return 0
	}
	[[ -f $src/RELEASES.md ]] || {
		echo "$src/RELEASES.md: containerd's release matrix is not where it was"
		return 0
	}
	row="$(awk -F'|' -v k="1.$minor" '{gsub(/ /, "", $2); gsub(/^ +| +$/, "", $3)} $2 == k {print $3; exit}' "$src/RELEASES.md")"
	if [[ -z $row ]]; then
		echo "containerd $CONTAINERD_VERSION's RELEASES.md lists no containerd for Kubernetes 1.$minor: take a containerd release that does"
	else
		mine="${CONTAINERD_VERSION#v}"
		for entry in ${row//,/ }; do
			entry="${entry%+}"
			line="${entry%.*}"
			[[ -z $newest ]] || version_ge "$line" "$newest" && newest="$line"
			[[ ${mine%.*} == "$line" ]] && version_ge "$mine" "$entry" && covered=1
		done
		[[ -n $covered ]] || { [[ ${mine%.*} != "$newest" ]] && version_ge "${mine%.*}" "$newest"; } ||
			echo "containerd $CONTAINERD_VERSION does not support Kubernetes 1.$minor: its RELEASES.md asks for $row"
	fi
	local want
	want="$(tr -d ' \n' <"$src/script/setup/runc-version" 2>/dev/null)"
	[[ -n $want ]] || echo "$src/script/setup/runc-version: containerd names no runc release"
	[[ -z $want ]] || version_ge "$RUNC_VERSION" "$want" ||
		echo "runc $RUNC_VERSION is older than $want, the runc containerd $CONTAINERD_VERSION's CI runs"
}

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

# The opt-in external-snapshot-metadata sidecar's manifest (its image is built
# like the other sidecars'), and the image of upstream's example client at the
# same version, under a name no registry serves: the ChangedBlocks scenario's
# backup application.
SNAPSHOT_METADATA_MANIFEST=packaging/kubernetes/snapshot-metadata/20-sidecar.yaml
snapshot_metadata_lister_image() { echo "zfs-csi.e2e/snapshot-metadata-lister:$1"; }

# The cluster's two nodes, one ZFS guest each (guest a boots as run.sh's first
# guest, b as its peer): role, node name, address on the link between the
# guests (--node-ip), kubelet port, pod subnet. The kubelet port is forwarded
# from the same port on the host's own address (k8s_host_ip); the apiserver,
# which resolves the node names to that address (cp_start), reaches each
# kubelet there.
K8S_NODES=(
	"a zfs-csi-e2e 192.168.77.1 30250 10.88.1.0/24"
	"b zfs-csi-e2e-b 192.168.77.2 30251 10.88.2.0/24"
)

# k8s_node ROLE FIELD prints one field of a node (name, ip, port or subnet).
k8s_node() {
	local line role name ip port subnet
	for line in "${K8S_NODES[@]}"; do
		read -r role name ip port subnet <<<"$line"
		[[ $role == "$1" ]] || continue
		case "$2" in name) echo "$name" ;; ip) echo "$ip" ;; port) echo "$port" ;; subnet) echo "$subnet" ;; *) return 1 ;; esac
		return
	done
	return 1
}

# k8s_host_ip prints the host's own IPv4 address (its default route's source):
# where qemu forwards the kubelets' ports and the apiserver dials them. Not
# 127.0.0.1: the apiserver refuses to proxy to a loopback or link-local
# address ("address not allowed"), and kubelet's logs, exec and port-forward
# go through that proxy.
k8s_host_ip() {
	ip -4 -o route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p'
}
