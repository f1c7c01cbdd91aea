# shellcheck shell=bash
# control-plane.sh — the e2e-k8s cluster's control plane on the host, at native
# speed: etcd (Debian's etcd-server), kube-apiserver, kube-controller-manager and
# kube-scheduler, with the harness's certificates. The nodes (kubelet, containerd,
# kube-proxy, zfs-csi) are the two ZFS guests, which reach the apiserver on
# 10.0.2.2:6443 through qemu's user network.
#
# The apiserver reaches the kubelets (exec, logs, port-forward) through qemu's
# forwards of their ports from the host's own address (K8S_NODES and
# k8s_host_ip in config.sh). It dials a node's preferred address at the port
# the node reports (status.daemonEndpoints); the address is the node's
# Hostname, its name, which only the apiserver resolves to the host's address:
# it runs in a mount namespace of its own where /etc/hosts is a copy with the
# nodes added. The nodes' own addresses are on the guests' link, which the
# host cannot reach; kubelet refuses a loopback --node-ip, the apiserver a
# loopback proxy target; and the host's resolver stays untouched.
#
# Sourced by e2e/run.sh (mode k8s): cp_start DIR BINDIR PKIDIR, cp_stop.
# Every process logs to DIR/<name>.log; cp_stop ends them all.

CP_PIDS=()

# cp_spawn NAME CMD... starts one process in the background, logging to DIR.
cp_spawn() {
	local name="$1"
	shift
	"$@" >"$CP_DIR/$name.log" 2>&1 &
	CP_PIDS+=("$!")
	echo "[k8s] started $name (pid $!)"
}

# cp_wait_ready waits up to $1 s for the apiserver's /readyz.
cp_wait_ready() {
	local deadline=$((SECONDS + $1))
	until "$CP_BIN/kubectl" --kubeconfig "$CP_PKI/admin.kubeconfig" get --raw /readyz >/dev/null 2>&1; do
		if ((SECONDS > deadline)); then
			echo "[k8s] ERROR: the apiserver was not ready within $1 s; its log:" >&2
			tail -n 40 "$CP_DIR/kube-apiserver.log" >&2
			return 1
		fi
		sleep 1
	done
}

# cp_hosts prints the apiserver's /etc/hosts: the host's, and every node's
# name at the host's address, where its kubelet's port is forwarded.
cp_hosts() {
	local line name ip
	ip="$(k8s_host_ip)"
	[[ -n $ip ]] || return 1
	cat /etc/hosts
	for line in "${K8S_NODES[@]}"; do
		read -r _ name _ <<<"$line"
		echo "$ip $name"
	done
}

cp_start() {
	CP_DIR="$1" CP_BIN="$2" CP_PKI="$3"
	local start=$SECONDS
	command -v etcd >/dev/null || die "etcd is missing (apt-get install etcd-server)"
	# Another run's control plane (one still stopping, or a run in another
	# checkout) holds these ports: say so instead of an apiserver log line.
	local port
	for port in 6443 32379 32380 10257 10259; do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "[k8s] port $port is in use: another control plane runs on this host (one make e2e-k8s at a time)" >&2
			return 1
		fi
	done
	rm -rf "$CP_DIR"
	mkdir -p "$CP_DIR"
	# Ports of its own: Debian's etcd-server starts etcd.service on 2379/2380
	# where systemd runs.
	cp_spawn etcd etcd --name e2e --data-dir "$CP_DIR/etcd" \
		--listen-client-urls http://127.0.0.1:32379 --advertise-client-urls http://127.0.0.1:32379 \
		--listen-peer-urls http://127.0.0.1:32380 --initial-advertise-peer-urls http://127.0.0.1:32380 \
		--initial-cluster e2e=http://127.0.0.1:32380
	# 10.0.2.2 is the host as the guest sees it: the "kubernetes" Service's
	# endpoint, which kube-proxy in the guest sends pods to.
	cp_hosts >"$CP_DIR/hosts" || die "the host has no IPv4 address of its own for the kubelets"
	# MutatingAdmissionPolicy (the group snapshot manifests' labelling
	# policy): beta and off by default before 1.36, GA and on from 1.36,
	# where setting its gate only draws a warning.
	local policy_flags=()
	if [[ $(k8s_mutating_policy_api) == */v1beta1 ]]; then
		policy_flags=(--feature-gates=MutatingAdmissionPolicy=true --runtime-config=admissionregistration.k8s.io/v1beta1=true)
	fi
	# $0 and $@ are the inner shell's: the hosts file and the apiserver's command.
	# shellcheck disable=SC2016
	cp_spawn kube-apiserver unshare --mount --propagation private \
		sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$CP_DIR/hosts" \
		"$CP_BIN/kube-apiserver" \
		--etcd-servers=http://127.0.0.1:32379 \
		--bind-address=127.0.0.1 --secure-port=6443 --advertise-address=10.0.2.2 \
		--tls-cert-file="$CP_PKI/apiserver.crt" --tls-private-key-file="$CP_PKI/apiserver.key" \
		--client-ca-file="$CP_PKI/ca.crt" \
		--service-account-issuer=https://kubernetes.default.svc \
		--service-account-key-file="$CP_PKI/sa.pub" --service-account-signing-key-file="$CP_PKI/sa.key" \
		--service-cluster-ip-range=10.0.0.0/24 \
		--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
		--allow-privileged=true \
		"${policy_flags[@]}" \
		--kubelet-preferred-address-types=Hostname \
		--kubelet-client-certificate="$CP_PKI/admin.crt" --kubelet-client-key="$CP_PKI/admin.key"
	cp_wait_ready 120 || return 1
	cp_spawn kube-controller-manager "$CP_BIN/kube-controller-manager" \
		--kubeconfig="$CP_PKI/admin.kubeconfig" \
		--authentication-kubeconfig="$CP_PKI/admin.kubeconfig" --authorization-kubeconfig="$CP_PKI/admin.kubeconfig" \
		--bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
		--use-service-account-credentials=true \
		--service-account-private-key-file="$CP_PKI/sa.key" --root-ca-file="$CP_PKI/ca.crt"
	cp_spawn kube-scheduler "$CP_BIN/kube-scheduler" \
		--kubeconfig="$CP_PKI/admin.kubeconfig" \
		--authentication-kubeconfig="$CP_PKI/admin.kubeconfig" --authorization-kubeconfig="$CP_PKI/admin.kubeconfig" \
		--bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false
	echo "[k8s] control plane ready after $((SECONDS - start)) s ($("$CP_BIN/kubectl" --kubeconfig "$CP_PKI/admin.kubeconfig" version 2>/dev/null | tr '\n' ' '))"
}

cp_stop() {
	local pid
	# || true: under set -e a killed child's status (143) would become the
	# script's own, hiding the run's verdict.
	for pid in "${CP_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	# An apiserver whose etcd went first can outlive its TERM (one held
	# port 6443 four minutes after its run ended, and a wait for it kept
	# make from returning for ten): give 20 s, then KILL, and only then
	# wait, which reaps it.
	local deadline=$((SECONDS + ${CP_STOP_GRACE:-20}))
	for pid in "${CP_PIDS[@]}"; do
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 1; done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	CP_PIDS=()
}
