#!/bin/bash
# suite.sh — the Kubernetes node of make e2e-k8s, run by zfs-csi-e2e.service
# on a systemd-booted guest (see ../systemd/boot.sh). The control plane runs on
# the host (e2e/k8s/control-plane.sh) at 10.0.2.2:6443. This script makes the
# guest a node the way an administrator would: network, pool, our .deb in
# Kubernetes mode, containerd with the images the host built, kubelet and
# kube-proxy (as systemd units, so the tests can restart them), the cluster's
# snapshot CRDs and snapshot-controller. Then the scenarios (e2e/k8s/suite,
# a Go test binary) run against the cluster. It writes results/exit-code and
# powers off.
set -uo pipefail

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive
SHARE=/share
RESULTS=$SHARE/results
GUEST_DIR=$SHARE/guest
K8S=$SHARE/k8s
POOL=tank
POOL_DISK=/dev/vdb
NODE=zfs-csi-e2e
NODE_IP=10.0.2.15
WORK=/tmp/e2e-k8s
export KUBECONFIG=$K8S/pki/admin-guest.kubeconfig

# shellcheck source=../lib.sh
source "$GUEST_DIR/lib.sh"

kubectl() { "$K8S/kubectl" "$@"; }

# --- the node ------------------------------------------------------------------

step_network() {
	local dev
	dev="$(ls /sys/class/net | grep -v '^lo$' | head -1)"
	[[ -n $dev ]] || { fail "no network interface"; return 1; }
	ip link set lo up && ip link set "$dev" up &&
		ip addr add "$NODE_IP/24" dev "$dev" && ip route add default via 10.0.2.2 || return 1
	wait_for 30 "the apiserver at 10.0.2.2:6443" bash -c 'exec 3<>/dev/tcp/10.0.2.2/6443' || return 1
	# The root disk's overlay is larger than its file system: grow it for images.
	resize2fs /dev/vda >/dev/null 2>&1
	hostname "$NODE"
	STEP_NOTE="$dev $NODE_IP, apiserver reachable, root $(df -h --output=size / | tail -1 | tr -d ' ')"
}

step_driver() {
	zpool create -f "$POOL" "$POOL_DISK" && zfs create "$POOL/csi" || return 1
	mkdir -p "$WORK"
	cp "$SHARE"/zfs-csi_*_amd64.deb "$WORK/" || return 1
	(cd "$WORK" && apt-get install -y -q ./zfs-csi_*_amd64.deb) >"$RESULTS/apt-install.log" 2>&1 ||
		{ tail -20 "$RESULTS/apt-install.log"; return 1; }
	set_option ZFS_CSI_PARENT_DATASETS "$POOL/csi"
	set_option ZFS_CSI_KUBERNETES true
	set_option ZFS_CSI_NODE_ID "$NODE"
	set_option ZFS_CSI_LOG_LEVEL debug
	systemctl restart zfs-csi || { systemctl status zfs-csi --no-pager; return 1; }
	STEP_NOTE="$(dpkg-query -W -f '${Version}' zfs-csi), $(zfs version | head -1)"
}

step_containerd() {
	modprobe overlay && modprobe br_netfilter || return 1
	sysctl -q -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 || return 1
	mkdir -p /etc/containerd /etc/cni/net.d
	cat >/etc/containerd/config.toml <<TOML
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$(cat "$K8S/pause-image")"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "/etc/cni/net.d"
TOML
	cat >/etc/cni/net.d/10-e2e.conflist <<'JSON'
{
  "cniVersion": "1.0.0",
  "name": "e2e",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
	systemctl restart containerd || return 1
	wait_for 30 "containerd" ctr version >/dev/null || return 1
	local tar n=0
	for tar in "$K8S"/images/*.tar; do
		ctr -n k8s.io images import "$tar" >/dev/null || { fail "ctr images import $tar"; return 1; }
		n=$((n + 1))
	done
	ctr -n k8s.io images ls -q | sed 's/^/    image: /'
	STEP_NOTE="containerd $(ctr version 2>/dev/null | sed -n 's/^ *Version: *//p' | head -1), $n images imported"
}

step_kubelet() {
	install -m 0755 "$K8S/kubelet" "$K8S/kube-proxy" /usr/local/bin/ || return 1
	mkdir -p /var/lib/kubelet /etc/kubernetes
	cp "$K8S/pki/ca.crt" /etc/kubernetes/ca.crt
	cp "$K8S/pki/kubelet-guest.kubeconfig" /etc/kubernetes/kubelet.kubeconfig
	cat >/etc/kubernetes/kubelet.yaml <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: /etc/kubernetes/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
resolvConf: ""
# The guest's disk is small and no registry can give an image back: never
# evict for disk, never collect images.
evictionHard: {memory.available: "64Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# A slow (emulated) node: report often enough, tolerate slow starts.
nodeStatusUpdateFrequency: 10s
runtimeRequestTimeout: 10m
YAML
	systemd-run --unit kubelet --property Restart=always \
		/usr/local/bin/kubelet --config /etc/kubernetes/kubelet.yaml \
		--kubeconfig /etc/kubernetes/kubelet.kubeconfig \
		--hostname-override "$NODE" --node-ip "$NODE_IP" --v 2 || return 1
	systemd-run --unit kube-proxy --property Restart=always \
		/usr/local/bin/kube-proxy --kubeconfig "$KUBECONFIG" --hostname-override "$NODE" \
		--proxy-mode iptables --cluster-cidr 10.88.0.0/16 || return 1
	wait_for 300 "node $NODE Ready" node_ready || { journalctl -u kubelet --no-pager | tail -40; return 1; }
	STEP_NOTE="node $NODE Ready ($(kubectl get node "$NODE" -o jsonpath='{.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}'))"
}

node_ready() {
	[[ $(kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

# The cluster's snapshot machinery, as a cluster administrator installs it:
# the CRDs and the snapshot-controller from the external-snapshotter module
# (the host added --enable-distributed-snapshotting).
step_addons() {
	kubectl apply -f "$K8S/addons/crds/" >/dev/null || return 1
	kubectl wait --for condition=established --timeout=120s crd --all >/dev/null || return 1
	kubectl apply -f "$K8S/addons/snapshot-controller/" || return 1
	STEP_NOTE="snapshot CRDs established, snapshot-controller applied"
}

step_scenarios() {
	local args=(-test.v -test.timeout 90m)
	[[ -s $K8S/go-test-run ]] && args+=(-test.run "$(cat "$K8S/go-test-run")")
	(cd "$WORK" && ZFS_CSI_E2E_MANIFESTS="$K8S/manifests" ZFS_CSI_E2E_CHART="$K8S/chart.yaml" ZFS_CSI_E2E_KUBECTL="$K8S/kubectl" \
		ZFS_CSI_E2E_NODE="$NODE" ZFS_CSI_E2E_POOL="$POOL" ZFS_CSI_E2E_WORKLOAD_IMAGE="$(cat "$K8S/workload-image")" \
		"$K8S/k8s.test" "${args[@]}") 2>&1 | tee "$RESULTS/scenarios.log"
	local rc=${PIPESTATUS[0]}
	go_test_summary "$RESULTS/scenarios.log"
	return "$rc"
}

collect_logs() {
	journalctl -u zfs-csi --no-pager -o short-precise >"$RESULTS/driver.log" 2>&1
	journalctl -u kubelet --no-pager -o short-precise >"$RESULTS/kubelet.log" 2>&1
	journalctl -u containerd --no-pager -o short-precise >"$RESULTS/containerd.log" 2>&1
	journalctl -u kube-proxy --no-pager -o short-precise >"$RESULTS/kube-proxy.log" 2>&1
	mkdir -p "$RESULTS/pods" && cp -rL /var/log/pods/. "$RESULTS/pods/" 2>/dev/null
	zfs list -t all -o name,type,used,mountpoint >"$RESULTS/zfs-list.txt" 2>&1
}

main() {
	mkdir -p "$RESULTS" "$WORK"
	local failed=0 s
	for s in network driver containerd kubelet addons; do
		step "node-$s" "step_$s" || { failed=$((failed + 1)); break; }
	done
	if [[ $failed -eq 0 ]]; then
		step scenarios step_scenarios || failed=$((failed + 1))
	fi
	collect_logs
	say "e2e-k8s guest finished with $failed failed steps after $SECONDS s"
	echo "$failed" >"$RESULTS/exit-code"
	sync
	systemctl --no-block poweroff
}

main
