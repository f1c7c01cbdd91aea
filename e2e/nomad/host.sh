# shellcheck shell=bash
# host.sh — the host side of make e2e-nomad, sourced by e2e/run.sh (mode
# nomad). nomad_prepare DIR lays out what the two hosts need in the share (DIR
# is share/nomad): the nomad binary, the shipped packaging/nomad files, docs/nomad.md
# and the scenario binary. run.sh's peer_start boots the second guest (node-b)
# beside the one run_guest boots (node-a); peer_stop waits for it to power off.

NOMAD_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=config.sh
source "$NOMAD_DIR/config.sh"
# shellcheck source=../peer-certs.sh
source "$NOMAD_DIR/../peer-certs.sh"

nomad_prepare() {
	local dir="$1" bin
	mkdir -p "$dir/specs"
	bin="$("$NOMAD_DIR/build-nomad.sh")" || die "cannot build Nomad $NOMAD_VERSION"
	install -m 0755 "$bin" "$dir/nomad"
	cp "$REPO"/packaging/nomad/*.hcl "$dir/specs/"
	# The guests run docs/nomad.md's setup commands as they are written.
	cp "$REPO/docs/nomad.md" "$dir/nomad.md"
	# Adoption reads docs/adopting.md's register block from the package, or
	# from this copy when the guest's dpkg left the documentation out.
	cp "$REPO/docs/adopting.md" "$dir/adopting.md"
	peer_certs "$dir/peer" node-a node-b || die "cannot make the peer channel's certificates"
	echo "${E2E_GO_TEST_RUN:-}" >"$dir/go-test-run"
	(cd "$REPO/e2e" && CGO_ENABLED=0 go test -c -o "$dir/nomad.test" ./nomad/suite) ||
		die "the scenarios do not compile (e2e/nomad/suite)"
}

