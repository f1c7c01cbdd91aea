# shellcheck shell=bash
# host.sh — the host side of make e2e-nomad, sourced by e2e/run.sh (mode
# nomad). nomad_prepare DIR lays out what the two hosts need in the share (DIR
# is share/nomad): the nomad binary, the shipped packaging/nomad files, README.md
# and the scenario binary. nomad_peer_start boots the second guest (node-b) beside the
# one run_guest boots (node-a); nomad_peer_stop waits for it to power off.

NOMAD_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=config.sh
source "$NOMAD_DIR/config.sh"

nomad_prepare() {
	local dir="$1" bin
	mkdir -p "$dir/specs"
	bin="$("$NOMAD_DIR/build-nomad.sh")" || die "cannot build Nomad $NOMAD_VERSION"
	install -m 0755 "$bin" "$dir/nomad"
	cp "$REPO"/packaging/nomad/*.hcl "$dir/specs/"
	# The guests run README's Nomad commands as they are written.
	cp "$REPO/README.md" "$dir/README.md"
	echo "${E2E_GO_TEST_RUN:-}" >"$dir/go-test-run"
	(cd "$REPO" && CGO_ENABLED=0 go test -c -o "$dir/nomad.test" ./e2e/nomad/suite) ||
		die "the scenarios do not compile (e2e/nomad/suite)"
}

# The two guests are joined by a point-to-point link: qemu's socket network,
# node-b listening on a host port, node-a connecting to it.
NOMAD_LINK_PORT=$((20000 + $$ % 10000))
NOMAD_PEER_PID=

# nomad_link NAME prints the qemu arguments of a guest's end of the link.
nomad_link() {
	local how=connect mac=52:54:00:e2:e0:0a
	[[ $1 == b ]] && how=listen mac=52:54:00:e2:e0:0b
	echo "-netdev socket,id=peer,$how=127.0.0.1:$NOMAD_LINK_PORT -device virtio-net-pci,netdev=peer,mac=$mac"
}

nomad_peer_start() {
	(
		GUEST_NAME=b
		# shellcheck disable=SC2207
		GUEST_EXTRA_QEMU=($(nomad_link b))
		boot_guest "$IMAGE_DIR" >/dev/null
	) &
	NOMAD_PEER_PID=$!
	# node-a connects to the port node-b's qemu listens on. Not probed by
	# connecting: qemu would take the probe for its peer.
	local deadline=$((SECONDS + 30)) hex
	hex="$(printf '%04X' "$NOMAD_LINK_PORT")"
	until awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" {found=1} END {exit !found}' /proc/net/tcp; do
		((SECONDS < deadline)) || die "the second guest's qemu does not listen on $NOMAD_LINK_PORT"
		sleep 0.5
	done
	log "node-b booting (console: $E2E_OUT/console-b.log)"
}

# nomad_peer_stop gives node-b two minutes to power off after node-a's run
# (it does once node-a writes results/scenarios-done), then ends it, and
# prints its summary.
nomad_peer_stop() {
	[[ -n $NOMAD_PEER_PID ]] || return 0
	local deadline=$((SECONDS + 120))
	while kill -0 "$NOMAD_PEER_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 1; done
	if kill -0 "$NOMAD_PEER_PID" 2>/dev/null; then
		log "node-b did not power off: stopping it"
		pkill -P "$NOMAD_PEER_PID" 2>/dev/null || true
	fi
	wait "$NOMAD_PEER_PID" 2>/dev/null || true
	NOMAD_PEER_PID=
	if [[ -f $RESULTS/b/summary.txt ]]; then
		log "node-b:"
		sed 's/^/[e2e]   /' "$RESULTS/b/summary.txt"
	fi
}
