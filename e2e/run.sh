#!/usr/bin/env bash
# run.sh — the host side of the real-ZFS harness.
#
#   e2e/run.sh e2e    build the artifacts, boot the guest, run the suites (make e2e)
#   e2e/run.sh demo   boot the guest and walk through a short tour (make demo)
#   e2e/run.sh systemd  boot the guest with systemd and test the .deb (make e2e-systemd;
#                     guest/systemd/), with its own out/e2e-systemd
#   e2e/run.sh k8s    a Kubernetes cluster: the control plane on the host (e2e/k8s),
#                     two guests as its nodes with our .deb, kubelet and containerd;
#                     the scenarios of e2e/k8s/suite (make e2e-k8s), out/e2e-k8s
#   e2e/run.sh nomad  a Nomad cluster of two guests (node-a: server and client,
#                     node-b: client), each with our .deb; the shipped job and specs;
#                     the scenarios of e2e/nomad/suite (make e2e-nomad), out/e2e-nomad
#   e2e/run.sh image  only build (or find) the cached guest image (make e2e-image)
#   e2e/run.sh bench  the benchmark, driver against bare zfs (make bench; guest/bench.sh,
#                     e2e/bench), with its own out/e2e-bench; BENCH_ARGS go to the
#                     bench program (e.g. "-quick"), BENCH_POOL_SIZE sizes the pool disk
#
# Environment: ZFS_VERSION (2.3|2.1), E2E_TIMEOUT (seconds for the whole guest
# run), ZFS_CSI_E2E_CACHE (image cache), E2E_SMOKE_ONLY=1 (skip the driver suites),
# E2E_KERNEL_ARGS (extra kernel command line, e.g. "" to drop "quiet"),
# K8S_CONFORMANCE=1 (mode k8s: the upstream storage suite instead of the
# scenarios, make e2e-k8s-conformance; e2e/k8s/conformance.sh).
#
# The guest gets everything through one 9p share (out/e2e/share): the binaries,
# the guest scripts, and a results/ folder it writes back. Nothing that changes
# per run is baked into the image, so only a recipe change rebuilds it.
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$E2E_DIR")"
# shellcheck source=config.sh
source "$E2E_DIR/config.sh"
# shellcheck source=traps.sh
source "$E2E_DIR/traps.sh"

OUT="$REPO/out"
E2E_OUT="$OUT/e2e"
[[ ${1:-} == systemd ]] && E2E_OUT="$OUT/e2e-systemd" # keeps the init-booted run's results
[[ ${1:-} == bench ]] && E2E_OUT="$OUT/e2e-bench"
[[ ${1:-} == k8s ]] && E2E_OUT="$OUT/e2e-k8s"
[[ ${1:-} == nomad ]] && E2E_OUT="$OUT/e2e-nomad"
SHARE="$E2E_OUT/share"
RESULTS="$SHARE/results"
CONSOLE_LOG="$E2E_OUT/console.log"
TOOLS="$OUT/tools"
: "${E2E_KERNEL_ARGS=quiet}"

log() { echo "[e2e] $*"; }
die() {
	echo "[e2e] ERROR: $*" >&2
	exit 1
}
loud() {
	echo "[e2e] ****************************************************************"
	echo "[e2e] **** $*"
	echo "[e2e] ****************************************************************"
}

# build_driver builds the static driver into out/zfs-csi, or returns 1 when
# E2E_SMOKE_ONLY=1 asks for the smoke suite alone.
build_driver() {
	if [[ ${E2E_SMOKE_ONLY:-} == 1 ]]; then
		loud "E2E_SMOKE_ONLY=1: not building the driver, only the smoke suite runs"
		return 1
	fi
	make -C "$REPO" --no-print-directory build || die "the driver does not build (make build)"
}

# build_e2e_tests compiles the e2e Go test package.
build_e2e_tests() {
	(cd "$E2E_DIR" && CGO_ENABLED=0 go test -c -tags e2e -o "$OUT/e2e.test" ./tests) ||
		die "the e2e tests do not compile (cd e2e && go test -c -tags e2e ./tests)"
}

# csi_sanity prints the path of the pinned csi-sanity, building it once per version.
csi_sanity() {
	local bin="$TOOLS/csi-sanity-$CSI_SANITY_VERSION"
	if [[ ! -x $bin ]]; then
		log "building csi-sanity $CSI_SANITY_VERSION from the Go module proxy" >&2
		local gobin="$TOOLS/.gobin-$$"
		# Outside the repo's module so its go.mod is neither read nor touched.
		(cd / && GOBIN="$gobin" CGO_ENABLED=0 go install "$CSI_SANITY_MODULE@$CSI_SANITY_VERSION") >&2 ||
			die "cannot build csi-sanity $CSI_SANITY_VERSION"
		mv "$gobin/csi-sanity" "$bin"
		rm -rf "$gobin"
	fi
	echo "$bin"
}

# prepare_share lays out the 9p share for one run: fresh results, current scripts.
prepare_share() {
	local mode="$1"
	rm -rf "$SHARE"
	mkdir -p "$SHARE/guest" "$RESULTS"
	cp -r "$E2E_DIR"/guest/. "$SHARE/guest/"
	echo "$mode" >"$SHARE/mode"
	# Narrowing knobs for quick checks (e.g. that a broken driver fails):
	# E2E_GO_TEST_RUN is the e2e tests' -test.run pattern, E2E_SANITY=0
	# leaves csi-sanity out.
	echo "${E2E_GO_TEST_RUN:-}" >"$SHARE/go-test-run"
	echo "${E2E_SANITY:-1}" >"$SHARE/sanity"
	# The guest's Go test binaries take their -test.timeout from what is
	# left of this (lib.sh go_test_timeout).
	echo "$E2E_TIMEOUT" >"$SHARE/guest-deadline"
}

# share_binary copies a host-built binary into the share under NAME.
share_binary() { install -m 0755 "$1" "$SHARE/$2"; }

# boot_guest boots the image under TCG and streams its console with a prefix.
# The root disk is a throwaway qcow2 overlay, so the cached image never changes;
# the pool disk is a fresh sparse file. Returns qemu's (or timeout's) status.
boot_guest() {
	# GUEST_NAME (optional) names a second guest of the same run (make
	# e2e-nomad): its own disks, console log and prefix.
	local image="$1" name="${GUEST_NAME:-}" work="$E2E_OUT/work${GUEST_NAME:+-$GUEST_NAME}"
	local console="$E2E_OUT/console${name:+-$name}.log" prefix="[guest${name:+-$name}] "
	mkdir -p "$work"
	rm -f "$work/root.qcow2" "$work/pool.img"
	# GUEST_ROOT_SIZE (optional) makes the overlay larger than the image; the
	# guest grows its file system into it (resize2fs).
	qemu-img create -q -f qcow2 -b "$image/disk.img" -F raw "$work/root.qcow2" ${GUEST_ROOT_SIZE:+"$GUEST_ROOT_SIZE"}
	truncate -s "$GUEST_POOL_SIZE" "$work/pool.img"

	# The commas are inside qemu's own option values, not between elements.
	# shellcheck disable=SC2054
	local -a qemu=(
		qemu-system-x86_64 -accel tcg,thread=multi -cpu "${E2E_QEMU_CPU:-max}"
		-smp "$GUEST_CPUS" -m "$GUEST_MEMORY"
		-nodefaults -no-user-config -display none -no-reboot
		-serial stdio -monitor none
		-kernel "$image/vmlinuz" -initrd "$image/initrd.img"
		-append "console=ttyS0 root=/dev/vda rw init=$GUEST_BOOTSTRAP_INIT panic=1 $E2E_KERNEL_ARGS${name:+ zfs_csi_e2e.guest=$name}"
		-drive "file=$work/root.qcow2,format=qcow2,if=virtio,cache=unsafe"
		-drive "file=$work/pool.img,format=raw,if=virtio,cache=unsafe"
		-virtfs "local,path=$SHARE,mount_tag=share,security_model=none"
		-device virtio-rng-pci
		"${GUEST_EXTRA_QEMU[@]}"
	)
	log "booting the ZFS $ZFS_VERSION guest${name:+ $name} (TCG, deadline ${E2E_TIMEOUT} s)"
	set +e
	# sed -u strips the serial console's CRs and prefixes lines without buffering.
	# --foreground: without it timeout takes a process group of its own, and
	# an interrupted make (Ctrl-C, a TERM to its group) left qemu running.
	timeout --foreground -k 10 "$E2E_TIMEOUT" "${qemu[@]}" </dev/null 2>&1 |
		sed -u 's/\r//g' | tee "$console" | sed -u "s/^/$prefix/"
	local rc=${PIPESTATUS[0]}
	set -e
	return "$rc"
}

# A run's second guest, node-b (make e2e-nomad, make e2e-k8s), joined to the
# first by a point-to-point link: qemu's socket network, node-b listening on a
# host port, node-a connecting to it.
PEER_LINK_PORT=$((20000 + $$ % 10000))
PEER_PID=

# peer_link NAME (a or b) prints the qemu arguments of a guest's end of the link.
peer_link() {
	local how=connect mac=52:54:00:e2:e0:0a
	[[ $1 == b ]] && how=listen mac=52:54:00:e2:e0:0b
	echo "-netdev socket,id=peer,$how=127.0.0.1:$PEER_LINK_PORT -device virtio-net-pci,netdev=peer,mac=$mac"
}

# peer_start [QEMU_ARGS...] boots node-b in the background with its end of the
# link and QEMU_ARGS, and returns once its qemu listens for node-a's.
peer_start() {
	local -a extra=("$@")
	(
		GUEST_NAME=b
		# peer_link prints qemu arguments, one per word.
		# shellcheck disable=SC2207
		GUEST_EXTRA_QEMU=($(peer_link b) "${extra[@]}")
		boot_guest "$IMAGE_DIR" >/dev/null
	) &
	PEER_PID=$!
	# Not probed by connecting: qemu would take the probe for its peer.
	local deadline=$((SECONDS + 30)) hex
	hex="$(printf '%04X' "$PEER_LINK_PORT")"
	until awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" {found=1} END {exit !found}' /proc/net/tcp; do
		kill -0 "$PEER_PID" 2>/dev/null || die "the second guest's qemu ended: $(head -c 500 "$E2E_OUT/console-b.log" 2>/dev/null)"
		((SECONDS < deadline)) || die "the second guest's qemu does not listen on $PEER_LINK_PORT"
		sleep 0.5
	done
	log "node-b booting (console: $E2E_OUT/console-b.log)"
}

# peer_stop gives node-b two minutes to power off after node-a's run (it does
# once node-a writes results/scenarios-done), then ends it, and prints its
# summary.
peer_stop() {
	[[ -n $PEER_PID ]] || return 0
	local deadline=$((SECONDS + 120))
	while kill -0 "$PEER_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 1; done
	if kill -0 "$PEER_PID" 2>/dev/null; then
		log "node-b did not power off: stopping it"
		pkill -P "$PEER_PID" 2>/dev/null || true
	fi
	wait "$PEER_PID" 2>/dev/null || true
	PEER_PID=
	if [[ -f $RESULTS/b/summary.txt ]]; then
		log "node-b:"
		sed 's/^/[e2e]   /' "$RESULTS/b/summary.txt"
	fi
}

# last_heartbeat FILE says what the guest's watch_deadline (guest/lib.sh)
# last wrote, and how long before now: a guest killed at its deadline whose
# heartbeat is fresh ran on while a test hung, or while nobody read its
# console (the serial line blocks its writers when the host stops reading);
# one whose heartbeat is old stopped then, or its share did (a frozen kernel,
# a 9p server blocked on the host's disk: both silence the console too).
last_heartbeat() {
	local file="$1" up age
	up="$(cat "$file" 2>/dev/null)"
	if [[ ! $up =~ ^[0-9]+$ ]]; then
		echo "it wrote no heartbeat"
		return
	fi
	age=$(($(date +%s) - $(stat -c %Y "$file")))
	local what="the guest stopped then, or its share did"
	((age > 60)) || what="the guest ran on, and a test in it hung or its console was not read"
	echo "its last heartbeat (uptime $up s) came ${age} s before the kill: $what"
}

# verdict decides how the run went from qemu's status, the console and the
# exit-code file, and prints the evidence of a failure.
verdict() {
	local qemu_rc="$1" why=""
	if [[ $qemu_rc -eq 124 || $qemu_rc -eq 137 ]]; then
		why="guest hung: no power-off within E2E_TIMEOUT=$E2E_TIMEOUT s; $(last_heartbeat "$RESULTS/heartbeat")"
		[[ -f $RESULTS/b/heartbeat ]] && why+="; node-b: $(last_heartbeat "$RESULTS/b/heartbeat")"
	elif grep -q 'Kernel panic' "$CONSOLE_LOG"; then
		why="guest kernel panic: $(grep -m1 'Kernel panic' "$CONSOLE_LOG")"
	elif grep -q 'ZFS-MODULE-MISSING' "$CONSOLE_LOG"; then
		why="the guest could not load the ZFS module (image broken? rebuild with: rm -rf $(dirname "$IMAGE_DIR")/zfs-$ZFS_VERSION-*)"
	elif grep -q 'E2E-BOOTSTRAP-FAILED' "$CONSOLE_LOG"; then
		why="the guest could not mount the 9p share"
	elif [[ $qemu_rc -ne 0 ]]; then
		why="qemu failed with status $qemu_rc"
	elif [[ ! -f $RESULTS/exit-code ]]; then
		why="the guest powered off without writing an exit code"
	elif [[ $(cat "$RESULTS/exit-code") != 0 ]]; then
		why="the guest reported exit code $(cat "$RESULTS/exit-code") (failed steps, or a setup error above)"
	fi

	if [[ -f $RESULTS/summary.txt ]]; then
		log "summary (ZFS $ZFS_VERSION):"
		sed 's/^/[e2e]   /' "$RESULTS/summary.txt"
		echo "e2e: $(grep -c '^PASS' "$RESULTS/summary.txt") passed, $(grep -c '^FAIL' "$RESULTS/summary.txt") failed"
	fi
	[[ -z $why ]] && return 0

	log "last 50 guest console lines:"
	tail -n 50 "$CONSOLE_LOG" | sed 's/^/[guest-tail] /'
	if [[ -s $RESULTS/driver.log ]]; then
		log "driver log ($RESULTS/driver.log, last 200 lines):"
		tail -n 200 "$RESULTS/driver.log" | sed 's/^/[driver] /'
	fi
	if [[ -f $RESULTS/summary.txt ]] && grep -q '^FAIL' "$RESULTS/summary.txt"; then
		log "failed steps (again, after the logs):"
		grep '^FAIL' "$RESULTS/summary.txt" | sed 's/^/[e2e]   /'
	fi
	log "FAILED: $why"
	log "full console: $CONSOLE_LOG; results: $RESULTS"
	return 1
}

# run_guest MODE boots the guest in MODE and judges the outcome.
run_guest() {
	local mode="$1" start=$SECONDS qemu_rc=0
	boot_guest "$IMAGE_DIR" || qemu_rc=$?
	log "guest run took $((SECONDS - start)) s"
	verdict "$qemu_rc"
}

# record_results MODE STATUS SECONDS writes the run's row into docs/testing.md's
# results table and out/results.json (e2e/results), from the summaries. Not
# part of the verdict: a failure to record is only logged.
record_results() {
	local -a args=(-mode "$1" -exit "$2" -seconds "$3" -zfs "$ZFS_VERSION" -summary "$RESULTS/summary.txt")
	if [[ -f $RESULTS/b/summary.txt ]]; then args+=(-summary "$RESULTS/b/summary.txt"); fi
	if [[ -n ${K8S_VERSION:-} ]]; then args+=(-kubernetes "$K8S_VERSION"); fi
	if [[ -n ${NOMAD_VERSION:-} ]]; then args+=(-nomad "$NOMAD_VERSION"); fi
	if [[ -n ${CONF_OUT:-} ]]; then args+=(-conformance "$CONF_OUT/summary.txt"); fi
	# Built in the e2e module, run from the repository's root: the table's
	# document and the git state it records are the repository's.
	if ! (cd "$E2E_DIR" && go build -o "$OUT/results" ./results) || ! (cd "$REPO" && "$OUT/results" "${args[@]}"); then
		log "the results table was not updated (e2e/results failed)"
	fi
}

GUEST_EXTRA_QEMU=()

main() {
	local mode="${1:-e2e}" start=$SECONDS
	if [[ $mode == k8s || $mode == nomad ]] && [[ -z ${E2E_TIMEOUT_SET:-} ]]; then
		E2E_TIMEOUT=5400
		# The 23 Kubernetes scenarios on v1.37.2, with the host to themselves,
		# added up to about 8,400 s of guest time from two runs (the cluster
		# up at 625-986 s; Manifests alone took 371 s in one and 846 s in the
		# other), the benchmark Latency 1,875-2,290 s of it, which make
		# e2e-k8s now skips; 12,600 s leaves a slow Manifests, a busy host
		# and make bench-k8s room. Nomad's 19: 2,523 s.
		[[ $mode == k8s ]] && E2E_TIMEOUT=12600
		# The upstream suite, four test-driver YAMLs on TCG nodes.
		[[ ${K8S_CONFORMANCE:-} == 1 ]] && E2E_TIMEOUT=18000
	fi
	# The bench's scale section makes 10,000 volumes and lists them: most of
	# the whole bench's ~75 min in the emulated guest (4,386 s measured); 3 h
	# leaves room for a slower host.
	if [[ $mode == bench ]] && [[ -z ${E2E_TIMEOUT_SET:-} ]]; then
		E2E_TIMEOUT=10800
	fi
	# The orchestrators' nodes boot an image that also holds containerd, runc,
	# the CNI plugins and network tools; the Kubernetes control plane on the
	# host needs etcd.
	if [[ $mode == k8s || $mode == nomad ]]; then export E2E_IMAGE_FLAVOR=cluster; fi
	if [[ $mode == k8s ]]; then export E2E_HOST_ETCD=1; fi
	zfs_apt_target >/dev/null # validates ZFS_VERSION before any slow work
	"$E2E_DIR/host-deps.sh"
	IMAGE_DIR="$("$E2E_DIR/build-image.sh")"
	log "image: $IMAGE_DIR ($(tr '\n' ' ' <"$IMAGE_DIR/info"))"
	[[ $mode == image ]] && return 0

	prepare_share "$mode"
	case "$mode" in
	e2e)
		if build_driver; then
			share_binary "$OUT/zfs-csi" zfs-csi
			share_binary "$(csi_sanity)" csi-sanity
			build_e2e_tests
			share_binary "$OUT/e2e.test" e2e.test
		fi
		;;
	demo)
		build_driver || die "the demo needs the driver"
		share_binary "$OUT/zfs-csi" zfs-csi
		;;
	systemd)
		# The package as a user installs it: guest/systemd/suite.sh.
		make -C "$REPO" --no-print-directory deb rpm || die "the packages do not build (make deb rpm)"
		cp "$REPO"/dist/zfs-csi_*_amd64.deb "$REPO"/dist/zfs-csi-*.x86_64.rpm "$SHARE/"
		# README.md's install commands run as written, from a dist/ as make
		# deb leaves it (every architecture's package).
		mkdir -p "$SHARE/dist" && cp "$REPO"/dist/zfs-csi_*.deb "$SHARE/dist/" && cp "$REPO/README.md" "$SHARE/"
		share_binary "$(csi_sanity)" csi-sanity
		;;
	bench)
		build_driver || die "the bench needs the driver"
		(cd "$E2E_DIR" && CGO_ENABLED=0 go build -o "$OUT/bench" ./bench) || die "e2e/bench does not build"
		share_binary "$OUT/zfs-csi" zfs-csi
		share_binary "$OUT/bench" bench
		echo "${BENCH_ARGS:-}" >"$SHARE/bench-args"
		# Thick 1 GiB volumes by the hundred: a sparse disk, mostly never written.
		GUEST_POOL_SIZE="${BENCH_POOL_SIZE:-512G}"
		log "qemu guests already running on this host: $(pgrep -c qemu-system || true) (TCG guests share the CPUs: timings suffer)"
		;;
	k8s)
		# shellcheck source=k8s/host.sh
		source "$E2E_DIR/k8s/host.sh"
		make -C "$REPO" --no-print-directory deb PKG_ARCHES=amd64 || die "the package does not build (make deb)"
		cp "$REPO"/dist/zfs-csi_*_amd64.deb "$SHARE/"
		k8s_prepare "$SHARE/k8s"
		if [[ ${K8S_CONFORMANCE:-} == 1 ]]; then
			# shellcheck source=k8s/conformance.sh
			source "$E2E_DIR/k8s/conformance.sh"
			conf_prepare "$SHARE/k8s"
		fi
		# Claims are thick (a reservation each) and many at once (the
		# Latency scenario's 20 of 1 GiB, the conformance suite's): a
		# larger sparse pool disk, mostly never written. With 8G only 7 of
		# the 20 fitted, and their pods waited for capacity.
		GUEST_POOL_SIZE=64G
		# Two nodes: each reaches the host (10.0.2.2) through its own qemu user
		# network, and the other node over the link; room for images on the
		# root disk and memory for kubelet, containerd and pods.
		GUEST_ROOT_SIZE=12G
		GUEST_MEMORY=5G
		# peer_link and k8s_node_net print qemu arguments, one per word.
		# shellcheck disable=SC2207
		GUEST_EXTRA_QEMU=($(peer_link a) $(k8s_node_net a))
		# Set first: a control plane that fails half-way leaves no etcd behind.
		at_exit cp_stop
		cp_start "$E2E_OUT/control-plane" "$K8S_BIN" "$SHARE/k8s/pki" || die "the control plane did not start (logs: $E2E_OUT/control-plane)"
		# k8s_node_net prints qemu arguments, one per word.
		# shellcheck disable=SC2046
		peer_start $(k8s_node_net b)
		at_exit 'peer_stop; cp_stop'
		if [[ ${K8S_CONFORMANCE:-} == 1 ]]; then
			conf_run &
			CONF_PID=$!
		fi
		;;
	nomad)
		# shellcheck source=nomad/host.sh
		source "$E2E_DIR/nomad/host.sh"
		make -C "$REPO" --no-print-directory deb PKG_ARCHES=amd64 || die "the package does not build (make deb)"
		cp "$REPO"/dist/zfs-csi_*_amd64.deb "$SHARE/"
		nomad_prepare "$SHARE/nomad"
		GUEST_MEMORY=3G
		# peer_link prints qemu arguments, one per word.
		# shellcheck disable=SC2207
		GUEST_EXTRA_QEMU=($(peer_link a))
		peer_start
		at_exit peer_stop
		;;
	*) die "unknown mode '$mode' (e2e, demo, systemd, bench, k8s, nomad or image)" ;;
	esac
	log "artifacts ready after $((SECONDS - start)) s"
	local rc=0
	run_guest "$mode" || rc=$?
	if [[ -n ${CONF_PID:-} ]]; then
		wait "$CONF_PID" || true
		conf_summary || rc=1
	fi
	if [[ $mode == k8s && -f $RESULTS/latency.txt ]]; then
		log "what a Kubernetes user waits for ($RESULTS/latency.txt):"
		cat "$RESULTS/latency.txt"
	fi
	if [[ $mode == bench && -f $RESULTS/bench.txt ]]; then
		log "bench table ($RESULTS/bench.txt):"
		cat "$RESULTS/bench.txt"
	fi
	if [[ $mode =~ ^(e2e|systemd|k8s|nomad)$ ]]; then
		peer_stop # node b's summary is complete once it is off
		record_results "$mode" "$rc" "$((SECONDS - start))"
	fi
	log "total $((SECONDS - start)) s"
	return "$rc"
}

main "$@"
