#!/bin/bash
# suite.sh — one node of make e2e-k8s, run by zfs-csi-e2e.service on a
# systemd-booted guest (see ../systemd/boot.sh). Two guests run it at once
# (../../k8s/config.sh, K8S_NODES, is their table):
#
#   guest a  zfs-csi-e2e    192.168.77.1  applies the cluster's add-ons, runs
#            the scenarios (e2e/k8s/suite), hands the cluster to the host for
#            the upstream suite (make e2e-k8s-conformance), tells b when done
#   guest b  zfs-csi-e2e-b  192.168.77.2  a node; publishes its `zfs list`
#            into the share for a's scenarios until a is done
#
# The control plane runs on the host (e2e/k8s/control-plane.sh) at
# 10.0.2.2:6443, which each guest reaches through its own qemu user network;
# the guests reach each other (and each other's pods) over a point-to-point
# link. The host's apiserver reaches each kubelet at its node's port, which
# qemu forwards from the host's loopback. Each guest becomes a node the way an
# administrator would make it: network, pool, our .deb in Kubernetes mode,
# containerd with the images the host built, kubelet and kube-proxy (as
# systemd units, so the tests can restart them). It writes results/exit-code
# (b: results/b/exit-code) and powers off.
set -uo pipefail

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive
SHARE=/share
GUEST_DIR=$SHARE/guest
K8S=$SHARE/k8s
ROLE=a
grep -q 'zfs_csi_e2e.guest=b' /proc/cmdline && ROLE=b
PEER=b
[[ $ROLE == b ]] && PEER=a
RESULTS=$SHARE/results
[[ $ROLE == b ]] && RESULTS=$SHARE/results/b
# node_field ROLE N prints field N of a node's line in the table.
node_field() { awk -v r="$1" -v n="$2" '$1 == r {print $n}' "$K8S/nodes"; }
NODE="$(node_field "$ROLE" 2)"
NODE_IP="$(node_field "$ROLE" 3)"
KUBELET_PORT="$(node_field "$ROLE" 4)"
POD_SUBNET="$(node_field "$ROLE" 5)"
PEER_NODE="$(node_field "$PEER" 2)"
POOL=tank
POOL_DISK=/dev/vdb
WORK=/tmp/e2e-k8s
DONE=$SHARE/results/scenarios-done
export KUBECONFIG=$K8S/pki/admin-guest.kubeconfig

# shellcheck source=../lib.sh
source "$GUEST_DIR/lib.sh"

# The tools the node runs come off the share once, in step_kubelet: the 9p
# share is mounted without a page cache, so every exec of a binary on it
# reads it through 9p again. Under TCG, step cluster's `kubectl get --raw`
# took 22.8 to 23.6 s from the share and 5.2 to 6.1 s from the root disk.
BIN=/usr/local/bin
kubectl() { "$BIN/kubectl" "$@"; }

# --- the node ------------------------------------------------------------------

# by_mac MAC prints the name of the interface with that address.
by_mac() { grep -lx "$1" /sys/class/net/*/address 2>/dev/null | sed -n 1p | cut -d/ -f5; }

# The user network (the host, 10.0.2.2, at the same address in both guests'
# qemu) carries the default route; the link carries the node address and the
# route to the other node's pods. MACs: run.sh's peer_link, host.sh's
# k8s_node_net.
step_network() {
	local user link
	user="$(by_mac "52:54:00:e2:e1:0$ROLE")"
	link="$(by_mac "52:54:00:e2:e0:0$ROLE")"
	[[ -n $user && -n $link ]] || { fail "no interface with the user network's or the link's MAC: $(ls /sys/class/net)"; return 1; }
	ip link set lo up && ip link set "$user" up && ip link set "$link" up &&
		ip addr add 10.0.2.15/24 dev "$user" && ip route add default via 10.0.2.2 &&
		ip addr add "$NODE_IP/24" dev "$link" &&
		ip route add "$(node_field "$PEER" 5)" via "$(node_field "$PEER" 3)" dev "$link" || return 1
	wait_for 30 "the apiserver at 10.0.2.2:6443" bash -c 'exec 3<>/dev/tcp/10.0.2.2/6443' || return 1
	# The root disk's overlay is larger than its file system: grow it for images.
	resize2fs /dev/vda >/dev/null 2>&1
	hostname "$NODE"
	STEP_NOTE="$NODE $NODE_IP on $link, $user to the host, apiserver reachable, root $(df -h --output=size / | tail -1 | tr -d ' ')"
}

step_driver() {
	install_driver "$POOL_DISK" "$WORK" || return 1
	set_option ZFS_CSI_KUBERNETES true
	set_option ZFS_CSI_NODE_ID "$NODE"
	# Each node serves the other at port 7443 of its link address, as the
	# nodes' table gives them.
	peer_channel "$K8S/peer" "$NODE_IP:7443" \
		"$(awk '{printf "%s%s=%s:7443", (NR > 1 ? "," : ""), $2, $3}' "$K8S/nodes")" || return 1
	# The daemon refuses a kubelet directory that does not exist (a wrong
	# --kubelet-dir would leave kubelet without the plugin): make it first,
	# as kubelet's package does on a real node.
	mkdir -p /var/lib/kubelet
	restart_driver
}

step_containerd() {
	modprobe overlay && modprobe br_netfilter || return 1
	sysctl -q -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 || return 1
	mkdir -p /etc/containerd /etc/cni/net.d
	# The host built containerd and runc at versions that support this
	# Kubernetes (Debian 12's are too old for any it runs): they replace the
	# image's, at the same paths, so the packaged unit runs them and no older
	# shim or runc is found first.
	install -m 0755 "$K8S/runtime/containerd" "$K8S/runtime/containerd-shim-runc-v2" "$K8S/runtime/ctr" /usr/bin/ &&
		install -m 0755 "$K8S/runtime/runc" /usr/sbin/runc || return 1
	# cgroupfs, here and in kubelet.yaml: with the systemd driver, kubelet
	# decoded systemd's D-Bus signals all the time (14 % of an idle node's
	# kubelet CPU under TCG) and every container went through a transient
	# unit. The driver plays no part in what the CSI plugin does.
	# containerd's CRI plugin asks every shim for its container's CPU figures
	# once a second (stats_collect_period, for kubelet's CRI stats, which
	# this kubelet does not use): under TCG a dozen ttrpc calls and cgroup
	# reads each second on a node already short of CPU; every 10 s here.
	cat >/etc/containerd/config.toml <<TOML
version = 3
[plugins.'io.containerd.cri.v1.runtime']
  stats_collect_period = "10s"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "$(cat "$K8S/pause-image")"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "/usr/sbin/runc"
  SystemdCgroup = false
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "/etc/cni/net.d"
TOML
	# Every pod's sandbox runs this chain, adding and again deleting, and under
	# TCG each program it starts takes a loaded node a second or more: the
	# bridge plugin's own masquerading (ipMasq) ran iptables and ip6tables
	# for every pod, portmap served no pod (none asks for a host port), and
	# a sandbox took 35 to 55 s. Three rules, set here once, masquerade what
	# the bridge did: the pods' traffic to anywhere but their own subnet and
	# multicast.
	iptables -t nat -A POSTROUTING -s "$POD_SUBNET" -d "$POD_SUBNET" -j RETURN &&
		iptables -t nat -A POSTROUTING -s "$POD_SUBNET" -d 224.0.0.0/4 -j RETURN &&
		iptables -t nat -A POSTROUTING -s "$POD_SUBNET" -j MASQUERADE || return 1
	cat >/etc/cni/net.d/10-e2e.conflist <<JSON
{
  "cniVersion": "1.0.0",
  "name": "e2e",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_SUBNET"}]], "routes": [{"dst": "0.0.0.0/0"}]}}
  ]
}
JSON
	# Two node services are waited on with fixed timeouts: containerd by
	# itself (10 s to handle a task's exit, 100 ms for a shim to answer on
	# its socket) and the daemon by the sidecars (a connection's HTTP/2
	# handshake within 20 s, or the sidecar exits "Lost connection to CSI
	# driver"). On nodes whose CPUs are saturated under TCG both were missed:
	# a sandbox's task delete timed out 87 times in 45 min on node a while
	# its pod stayed Running, and a sidecar starting beside its two
	# siblings exited after 21 s while the daemon logged nothing for a
	# minute. Both get CPU before kubelet, the pods and the test runner, as
	# they would on a real node (containerd's shims run in its cgroup).
	systemctl set-property --runtime containerd.service CPUWeight=1000 &&
		systemctl set-property --runtime zfs-csi.service CPUWeight=1000 || return 1
	systemctl restart containerd || return 1
	wait_for 30 "containerd" ctr version >/dev/null || return 1
	# The daemon that answers is the one the host built (the ctr installed
	# beside it), not the image's.
	# ctr version prints the client's Version: line, then the server's.
	local client served
	read -r client served < <(ctr version | awk '$1 == "Version:" {printf "%s ", $2} END {print ""}')
	[[ $served == "$client" ]] || { fail "containerd serves $served, not the $client the host built"; return 1; }
	local tar n=0
	for tar in "$K8S"/images/*.tar; do
		ctr -n k8s.io images import "$tar" >/dev/null || { fail "ctr images import $tar"; return 1; }
		n=$((n + 1))
	done
	ctr -n k8s.io images ls -q | sed 's/^/    image: /'
	STEP_NOTE="containerd $served, $(runc --version | sed -n 1p), $n images imported"
}

step_kubelet() {
	install -m 0755 "$K8S/kubelet" "$K8S/kube-proxy" "$K8S/kubectl" "$K8S/helm" "$K8S/k8s.test" "$BIN/" || return 1
	mkdir -p /var/lib/kubelet /etc/kubernetes
	cp "$K8S/pki/ca.crt" /etc/kubernetes/ca.crt
	cp "$K8S/pki/kubelet-$NODE.kubeconfig" /etc/kubernetes/kubelet.kubeconfig
	cat >/etc/kubernetes/kubelet.yaml <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: /etc/kubernetes/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
# The apiserver dials this port on the host's loopback (qemu forwards it).
port: $KUBELET_PORT
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
	# Container stats every 30 s instead of 10: cAdvisor's housekeeping was
	# another 14 % of an idle node's kubelet, and no scenario reads them.
	systemd-run --unit kubelet --property Restart=always \
		"$BIN/kubelet" --config /etc/kubernetes/kubelet.yaml \
		--kubeconfig /etc/kubernetes/kubelet.kubeconfig \
		--hostname-override "$NODE" --node-ip "$NODE_IP" --v 2 --housekeeping-interval 30s || return 1
	systemd-run --unit kube-proxy --property Restart=always \
		"$BIN/kube-proxy" --kubeconfig "$KUBECONFIG" --hostname-override "$NODE" \
		--proxy-mode iptables --cluster-cidr 10.88.0.0/16 || return 1
	wait_for 300 "node $NODE Ready" node_ready "$NODE" || { journalctl -u kubelet --no-pager | tail -40; return 1; }
	STEP_NOTE="node $NODE Ready ($(kubectl get node "$NODE" -o jsonpath='{.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}'))"
}

node_ready() {
	[[ $(kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

# a: both nodes Ready, and the apiserver reaches both kubelets (what kubectl
# exec, logs and port-forward go through): the kubelet's /healthz through the
# apiserver's node proxy, timed.
step_cluster() {
	wait_for 600 "node $PEER_NODE Ready" node_ready "$PEER_NODE" || return 1
	local n t note=""
	for n in "$NODE" "$PEER_NODE"; do
		t=$(date +%s%N)
		[[ $(kubectl get --raw "/api/v1/nodes/$n/proxy/healthz" 2>&1) == ok ]] ||
			{ fail "the apiserver does not reach the kubelet of $n: $(kubectl get --raw "/api/v1/nodes/$n/proxy/healthz" 2>&1)"; return 1; }
		note+="$n kubelet via apiserver $((($(date +%s%N) - t) / 1000000)) ms; "
	done
	STEP_NOTE="$note$(kubectl get nodes --no-headers | wc -l) nodes Ready"
}

# The cluster's snapshot machinery, as a cluster administrator installs it:
# the CRDs and the snapshot-controller from the external-snapshotter module
# (the host added --enable-distributed-snapshotting), and the
# SnapshotMetadataService CRD of the external-snapshot-metadata sidecar.
step_addons() {
	kubectl apply -f "$K8S/addons/crds/" >/dev/null || return 1
	kubectl wait --for condition=established --timeout=120s crd --all >/dev/null || return 1
	kubectl apply -f "$K8S/addons/snapshot-controller/" || return 1
	STEP_NOTE="snapshot CRDs established, snapshot-controller applied"
}

# scenarios_asked prints E2E_GO_TEST_RUN as the host wrote it (with a
# newline, so the file is never empty), or nothing.
scenarios_asked() {
	tr -d '\n' <"$K8S/go-test-run" 2>/dev/null
}

step_scenarios() {
	# Unless E2E_GO_TEST_RUN says otherwise, the scenarios (TestCluster)
	# only: k8s.test's other tests are unit tests of the suite's helpers that
	# make test runs on the host, some reading the repository's files (first
	# run after conformance: three failed on missing docs and testdata).
	local run timeout
	run="$(scenarios_asked)"
	timeout="$(go_test_timeout)" || return 1
	local args=(-test.v -test.timeout "$timeout" -test.run "${run:-^TestCluster\$}")
	(cd "$WORK" && ZFS_CSI_E2E_MANIFESTS="$K8S/manifests" ZFS_CSI_E2E_CHART="$K8S/chart-src" ZFS_CSI_E2E_CHART_VALUES="$K8S/helm-values.yaml" ZFS_CSI_E2E_HELM="$BIN/helm" ZFS_CSI_E2E_KUBECTL="$BIN/kubectl" \
		ZFS_CSI_E2E_NODE="$NODE" ZFS_CSI_E2E_PEER_NODE="$PEER_NODE" ZFS_CSI_E2E_PEER_ZFS="$SHARE/results/b/zfs-list.txt" \
		ZFS_CSI_E2E_POOL="$POOL" ZFS_CSI_E2E_WORKLOAD_IMAGE="$(cat "$K8S/workload-image")" ZFS_CSI_E2E_RESULTS="$RESULTS" \
		ZFS_CSI_E2E_LISTER_IMAGE="$(cat "$K8S/lister-image")" ZFS_CSI_E2E_BENCH="$(cat "$K8S/bench")" \
		"$BIN/k8s.test" "${args[@]}") 2>&1 | tee "$RESULTS/scenarios.log"
	local rc=${PIPESTATUS[0]}
	go_test_summary "$RESULTS/scenarios.log"
	return "$rc"
}

# a, make e2e-k8s-conformance: the shipped manifests installed, the cluster
# is the host's (which runs e2e.test against it) until it writes
# results/conformance-done.
step_conformance() {
	kubectl apply -R -f "$K8S/manifests" >/dev/null || return 1
	wait_for 600 "the plugin Ready on both nodes" plugin_ready || { kubectl get pods -A -o wide; return 1; }
	probe_less_often || return 1
	touch "$SHARE/results/cluster-ready"
	local deadline=$((SECONDS + $(cat "$K8S/conformance-timeout")))
	while [[ ! -e $SHARE/results/conformance-done ]] && ((SECONDS < deadline)); do sleep 5; done
	[[ -e $SHARE/results/conformance-done ]] || { fail "the host's conformance run did not finish in time"; return 1; }
	# The scenarios after it start, as in make e2e-k8s, before the manifests
	# are applied: Registration restarts the daemon, which sidecars already
	# running would count as a restart (csi-provisioner exits when its socket
	# goes), and Manifests fails on that.
	kubectl delete -R -f "$K8S/manifests" --ignore-not-found --wait=true >/dev/null || return 1
	STEP_NOTE="the host ran the upstream suite (its summaries: out/e2e-k8s/conformance); the manifests removed again"
}

# HARNESS_PROBE_PERIOD is the suite's harnessProbePeriod: the sidecars'
# readiness probe period once the shipped one has been seen to work. Each
# exec probe is a runc exec, the zfs-csi binary and the daemon's zpool and
# zfs under it; with the shipped 10 s, during the ext4 YAML on v1.37.2 node
# a's kubelet counted 286 probes in 54 minutes taking 2,785 s, one in flight
# 86 % of the time, on a node whose CPU pressure stood at 93 %.
HARNESS_PROBE_PERIOD=60

# probe_less_often sets HARNESS_PROBE_PERIOD on every container of the
# sidecars' DaemonSet that has a readiness probe, and waits for the rollout:
# a DaemonSet's rollout ends when every node's new pod is available, Ready.
probe_less_often() {
	local ds=(-n zfs-csi ds/zfs-csi-sidecars) names name patch=""
	names="$(kubectl get "${ds[@]}" -o jsonpath='{range .spec.template.spec.containers[?(@.readinessProbe)]}{.name}{"\n"}{end}')" || return 1
	[[ -n $names ]] || { fail "DaemonSet zfs-csi-sidecars has no readiness probe"; return 1; }
	for name in $names; do
		patch+="${patch:+,}{\"name\":\"$name\",\"readinessProbe\":{\"periodSeconds\":$HARNESS_PROBE_PERIOD}}"
	done
	kubectl patch "${ds[@]}" -p "{\"spec\":{\"template\":{\"spec\":{\"containers\":[$patch]}}}}" >/dev/null || return 1
	kubectl rollout status "${ds[@]}" --timeout=600s >/dev/null || { kubectl get pods -A -o wide; return 1; }
}

# step_ok NAME: the step passed (its line in the summary).
step_ok() { grep -q "^PASS $1 " "$RESULTS/summary.txt"; }

# plugin_ready: a zfs-csi pod on every node, all containers ready.
plugin_ready() {
	local ready
	ready="$(kubectl get pods -n zfs-csi -o jsonpath='{range .items[*]}{.spec.nodeName}{" "}{range .status.containerStatuses[*]}{.ready}{" "}{end}{"\n"}{end}' 2>/dev/null)"
	grep -q "^$NODE " <<<"$ready" && grep -q "^$PEER_NODE " <<<"$ready" && ! grep -q false <<<"$ready"
}

# b: publish this node's datasets for a's scenarios until they are done,
# every PUBLISH_SECONDS: a's readers poll it. Node b is idle most of the run,
# and what it spends, a's guest cannot: with a second between lists, this
# loop was 59 of the 123 processes an idle node b started a minute, and an
# idle node's short-lived processes took 0.75 of its 2 vCPUs.
PUBLISH_SECONDS=5
step_publish() {
	local list=$RESULTS/zfs-list.txt
	while [[ ! -e $DONE ]]; do
		zfs list -H -t all -o name -r "$POOL" >"$list.tmp" 2>&1 && mv "$list.tmp" "$list"
		pause "$PUBLISH_SECONDS"
	done
	STEP_NOTE="node-a is done"
}

collect_logs() {
	[[ -z ${KEEPER:-} ]] || kill "$KEEPER" 2>/dev/null
	journalctl -u zfs-csi --no-pager -o short-precise >"$RESULTS/driver.log" 2>&1
	journalctl -u kubelet --no-pager -o short-precise >"$RESULTS/kubelet.log" 2>&1
	journalctl -u containerd --no-pager -o short-precise >"$RESULTS/containerd.log" 2>&1
	journalctl -u kube-proxy --no-pager -o short-precise >"$RESULTS/kube-proxy.log" 2>&1
	mkdir -p "$RESULTS/pods" && cp -rL "$POD_LOGS/." "$RESULTS/pods/" 2>/dev/null
	# The logs kubelet removed during the run, beside those it still had.
	cp -rn "$KEPT_POD_LOGS/." "$RESULTS/pods/" 2>/dev/null
	zfs list -t all -o name,type,used,mountpoint >"$RESULTS/zfs-list-end.txt" 2>&1
	cpu_by_cgroup >"$RESULTS/cpu-by-cgroup.txt" 2>&1
}

# cpu_by_cgroup prints the CPU seconds each service and pod used since boot,
# most first: on two emulated nodes sharing the host's cores, what one node
# spends idle the other cannot, and this says where it went.
cpu_by_cgroup() (
	shopt -s nullglob
	local files=(/sys/fs/cgroup/cpu.stat /sys/fs/cgroup/*/cpu.stat /sys/fs/cgroup/*/*/cpu.stat /sys/fs/cgroup/kubepods*/*/*/cpu.stat)
	awk '$1 == "usage_usec" {c = FILENAME; sub("^/sys/fs/cgroup/", "", c); printf "%10.1f s  %s\n", $2 / 1e6, c}' \
		"${files[@]}" | sort -rn
)

main() {
	mkdir -p "$RESULTS" "$WORK"
	watch_deadline &
	keep_pod_logs &
	KEEPER=$!
	local failed=0 s
	for s in network driver containerd kubelet; do
		step "$NODE-$s" "step_$s" || { failed=$((failed + 1)); break; }
	done
	if [[ $ROLE == a ]]; then
		local steps=(addons cluster scenarios)
		# make e2e-k8s-conformance: the host's run, then the scenarios only
		# if E2E_GO_TEST_RUN names some (on the same cluster).
		if [[ -e $K8S/conformance-timeout ]]; then
			steps=(addons cluster conformance)
		fi
		for s in "${steps[@]}"; do
			[[ $failed -eq 0 ]] || break
			step "$s" "step_$s" || failed=$((failed + 1))
		done
		if [[ -e $K8S/conformance-timeout && -n $(scenarios_asked) ]] && step_ok cluster; then
			step scenarios step_scenarios || failed=$((failed + 1))
		fi
		touch "$DONE"
	elif [[ $failed -eq 0 ]]; then
		step publish step_publish || failed=$((failed + 1))
	fi
	collect_logs
	say "e2e-k8s guest $ROLE finished with $failed failed steps after $SECONDS s"
	echo "$failed" >"$RESULTS/exit-code"
	sync
	systemctl --no-block poweroff
}

main
