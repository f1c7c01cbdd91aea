# shellcheck shell=bash
# host.sh — the host side of make e2e-k8s, sourced by e2e/run.sh (mode k8s):
# k8s_prepare DIR lays out everything the nodes need in the share (DIR is
# share/k8s): kubelet, kube-proxy, kubectl, the images, the certificates, the
# shipped manifests, the chart rendered with helm-values.yaml, the snapshot
# add-ons (and the SnapshotMetadataService CRD), the nodes' table (nodes) and the scenario binary. Everything slow is
# cached (build-k8s.sh, build-images.sh). k8s_node_net prints a node's user
# network for qemu.

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=config.sh
source "$K8S_DIR/config.sh"
# shellcheck source=control-plane.sh
source "$K8S_DIR/control-plane.sh"
# shellcheck source=../peer-certs.sh
source "$K8S_DIR/../peer-certs.sh"

# k8s_addons DIR SNAPSHOTTER_TAG writes the (group) snapshot CRDs and the
# snapshot-controller of the external-snapshotter module at the csi-snapshotter's
# version, as a cluster administrator deploys them for node-local drivers:
# --enable-distributed-snapshotting, the RBAC rule upstream leaves commented
# out for it (nodes), one replica.
k8s_addons() {
	local dir="$1" tag="$2" client ctrl
	client="$(mod_field "github.com/kubernetes-csi/external-snapshotter/client/${tag%%.*}@$tag")"
	ctrl="$(mod_field "github.com/kubernetes-csi/external-snapshotter/${tag%%.*}@$tag")"
	[[ -d $client && -d $ctrl ]] || die "cannot download external-snapshotter $tag"
	mkdir -p "$dir/crds" "$dir/snapshot-controller"
	cp "$client"/config/crd/*snapshot.storage.k8s.io_*.yaml "$dir/crds/"
	sed -e 's/^  # - apiGroups: \[""\]$/  - apiGroups: [""]/' \
		-e 's/^  #   resources: \["nodes"\]$/    resources: ["nodes"]/' \
		-e 's/^  #   verbs: \["get", "list", "watch"\]$/    verbs: ["get", "list", "watch"]/' \
		"$ctrl/deploy/kubernetes/snapshot-controller/rbac-snapshot-controller.yaml" >"$dir/snapshot-controller/rbac.yaml"
	grep -q 'resources: \["nodes"\]' "$dir/snapshot-controller/rbac.yaml" ||
		die "external-snapshotter $tag: the nodes rule of the snapshot-controller's RBAC moved; update k8s_addons"
	sed -e "s#image: registry.k8s.io/sig-storage/snapshot-controller:.*#image: $(snapshot_controller_image "$tag")#" \
		-e 's/^  replicas: 2$/  replicas: 1/' \
		-e 's/^\( *\)- "--leader-election=true"$/&\n\1- "--enable-distributed-snapshotting"/' \
		"$ctrl/deploy/kubernetes/snapshot-controller/setup-snapshot-controller.yaml" >"$dir/snapshot-controller/deployment.yaml"
	grep -q -- '--enable-distributed-snapshotting' "$dir/snapshot-controller/deployment.yaml" ||
		die "external-snapshotter $tag: could not add --enable-distributed-snapshotting"
}

# k8s_cbt_crd DIR TAG writes the SnapshotMetadataService CRD that the
# external-snapshot-metadata sidecar at TAG reads, as a cluster administrator
# installs it: from its client module, at the version the sidecar's go.mod
# requires (the sidecar's module zip leaves that nested module out).
k8s_cbt_crd() {
	local dir="$1" tag="$2" gomod version client
	gomod="$(mod_field "github.com/kubernetes-csi/external-snapshot-metadata@$tag" GoMod)"
	[[ -f $gomod ]] || die "cannot download external-snapshot-metadata $tag"
	version="$(awk '$1 == "github.com/kubernetes-csi/external-snapshot-metadata/client" && $2 ~ /^v/ {print $2; exit}' "$gomod")"
	[[ -n $version ]] || die "external-snapshot-metadata $tag requires no client module: where is its CRD?"
	client="$(mod_field "github.com/kubernetes-csi/external-snapshot-metadata/client@$version")"
	[[ -d $client ]] || die "cannot download external-snapshot-metadata/client $version"
	mkdir -p "$dir"
	cp "$client"/config/crd/cbt.storage.k8s.io_*.yaml "$dir/" || die "client $version has no cbt.storage.k8s.io CRD"
}

k8s_prepare() {
	local dir="$1" kbin tag policy_api
	policy_api="$(k8s_mutating_policy_api)" || die "K8S_VERSION=$K8S_VERSION is not a Kubernetes release (v1.MINOR.PATCH)"
	# The nodes' containerd and runc, held to containerd's own matrix for this
	# Kubernetes before anything is built.
	local problems runtime
	problems="$(runtime_problems "$(mod_field "github.com/containerd/containerd/v2@$CONTAINERD_VERSION")")"
	[[ -z $problems ]] || die "the nodes' runtime does not run Kubernetes $K8S_VERSION (set CONTAINERD_VERSION, RUNC_VERSION):
$problems"
	mkdir -p "$dir/images" "$dir/manifests"
	kbin="$("$K8S_DIR/build-k8s.sh")" || die "cannot build Kubernetes $K8S_VERSION"
	install -m 0755 "$kbin/kubelet" "$kbin/kube-proxy" "$kbin/kubectl" "$dir/"
	runtime="$("$K8S_DIR/build-k8s.sh" runtime)" || die "cannot build containerd $CONTAINERD_VERSION and runc $RUNC_VERSION"
	mkdir -p "$dir/runtime"
	install -m 0755 "$runtime/containerd" "$runtime/containerd-shim-runc-v2" "$runtime/ctr" "$runtime/runc" "$dir/runtime/"
	# Read by run.sh (cp_start) and conformance.sh, which source this file.
	# shellcheck disable=SC2034
	K8S_BIN="$kbin"
	local images
	images="$("$K8S_DIR/build-images.sh")" || die "cannot build the images"
	# Hard links: the share and the cache are on one file system, and the
	# tarballs are hundreds of MB.
	while read -r img; do ln -f "$img" "$dir/images/" 2>/dev/null || cp "$img" "$dir/images/"; done <<<"$images"
	# The cluster has the snapshot CRDs (k8s_addons): the manifests that need
	# them come along in snapshots/, applied with the rest (kubectl apply -R).
	mkdir -p "$dir/manifests/snapshots"
	cp "$REPO"/packaging/kubernetes/*.yaml "$dir/manifests/"
	cp "$REPO"/packaging/kubernetes/snapshots/*.yaml "$dir/manifests/snapshots/"
	# What users apply apart (group snapshots, the encryption opt-in): beside
	# the manifests, applied by the scenarios that need them.
	local optional
	for optional in groupsnapshots encryption snapshot-metadata; do
		mkdir -p "$dir/optional/$optional"
		cp "$REPO/packaging/kubernetes/$optional"/*.yaml "$dir/optional/$optional/"
	done
	# The chart, rendered here (helm is built for make test) with values that
	# are not its defaults; scenario Chart installs it in place of the manifests.
	make -s -C "$REPO" helm >&2 || die "cannot build helm (make helm)"
	local helm
	helm="$REPO/out/tools/helm-$(sed -n 's/^HELM_VERSION := //p' "$REPO/Makefile")"
	# In namespace zfs-csi-chart, on a cluster with the snapshot API and this
	# Kubernetes version (what helm install would learn from the cluster).
	"$helm" template zfs-csi "$REPO/packaging/helm/zfs-csi" --namespace zfs-csi-chart --values "$K8S_DIR/helm-values.yaml" \
		--api-versions snapshot.storage.k8s.io/v1 --api-versions groupsnapshot.storage.k8s.io/v1 \
		--api-versions "$policy_api/MutatingAdmissionPolicy" \
		--kube-version "$K8S_VERSION" >"$dir/chart.yaml" ||
		die "helm template of packaging/helm/zfs-csi failed"
	# Scenario Chart installs the chart as a user does, with helm install
	# --wait on the node (helm asks the cluster what APIs it serves).
	install -m 0755 "$helm" "$dir/helm"
	rm -rf "$dir/chart-src" && cp -r "$REPO/packaging/helm/zfs-csi" "$dir/chart-src"
	cp "$K8S_DIR/helm-values.yaml" "$dir/helm-values.yaml"
	tag="$(sed -n 's#^ *image: registry.k8s.io/sig-storage/csi-snapshotter:##p' "$REPO/packaging/kubernetes/30-sidecars.yaml")"
	k8s_addons "$dir/addons" "$tag"
	tag="$(sed -n 's#^ *image: registry.k8s.io/sig-storage/csi-snapshot-metadata:##p' "$REPO/$SNAPSHOT_METADATA_MANIFEST")"
	[[ -n $tag ]] || die "no csi-snapshot-metadata image in $SNAPSHOT_METADATA_MANIFEST"
	k8s_cbt_crd "$dir/addons/crds" "$tag"
	snapshot_metadata_lister_image "$tag" >"$dir/lister-image"
	printf '%s\n' "${K8S_NODES[@]}" >"$dir/nodes"
	echo "$PAUSE_IMAGE" >"$dir/pause-image"
	echo "$WORKLOAD_IMAGE" >"$dir/workload-image"
	echo "${E2E_GO_TEST_RUN:-}" >"$dir/go-test-run"
	echo "${K8S_BENCH:-}" >"$dir/bench"
	(cd "$K8S_DIR" && go run ./cmd/pki -dir "$dir/pki" -node "$(k8s_node a name),$(k8s_node b name)") || die "cannot make the certificates"
	# The daemons' peer channel (docs/across-nodes.md): node IDs are the node names.
	peer_certs "$dir/peer" "$(k8s_node a name)" "$(k8s_node b name)" || die "cannot make the peer channel's certificates"
	(cd "$K8S_DIR" && CGO_ENABLED=0 go test -c -o "$dir/k8s.test" ./suite) || die "the scenarios do not compile (e2e/k8s/suite)"
}

# k8s_node_net ROLE prints the qemu arguments of a node's user network: the
# host (the apiserver) at 10.0.2.2, and the node's kubelet port forwarded from
# the same port on the host's own address, where the apiserver dials it. The
# kubelet there answers only clients with a certificate of the cluster's CA.
k8s_node_net() {
	local port ip
	port="$(k8s_node "$1" port)"
	ip="$(k8s_host_ip)"
	[[ -n $ip ]] || die "the host has no IPv4 address of its own (ip route get) to forward the kubelets' ports from"
	echo "-netdev user,id=net0,hostfwd=tcp:$ip:$port-:$port -device virtio-net-pci,netdev=net0,mac=52:54:00:e2:e1:0$1"
}
