# shellcheck shell=bash
# host.sh — the host side of make e2e-nomad, sourced by e2e/run.sh (mode
# nomad). nomad_prepare DIR lays out what the two hosts need in the share (DIR
# is share/nomad): the nomad binary, the shipped packaging/nomad files, README.md
# and the scenario binary. run.sh's peer_start boots the second guest (node-b)
# beside the one run_guest boots (node-a); peer_stop waits for it to power off.

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
	nomad_peer_certs "$dir/peer" || die "cannot make the peer channel's certificates"
	echo "${E2E_GO_TEST_RUN:-}" >"$dir/go-test-run"
	(cd "$REPO" && CGO_ENABLED=0 go test -c -o "$dir/nomad.test" ./e2e/nomad/suite) ||
		die "the scenarios do not compile (e2e/nomad/suite)"
}

# nomad_peer_certs DIR makes what an operator gives the daemons for the peer
# channel (issue 38): a CA, and for each node a certificate naming it in the
# URI SAN urn:zfs-csi:node:<node>, for server and client authentication.
# Test-only: the keys travel through the share; a real cluster keeps each
# node's key on that node.
nomad_peer_certs() {
	local dir="$1" node
	rm -rf "$dir" && mkdir -p "$dir" || return 1
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
		-subj /CN=zfs-csi-e2e-peers -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null || return 1
	for node in node-a node-b; do
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$node" \
			-keyout "$dir/$node.key" -out "$dir/$node.csr" 2>/dev/null || return 1
		printf 'subjectAltName=URI:urn:zfs-csi:node:%s\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature\n' "$node" >"$dir/$node.ext"
		openssl x509 -req -in "$dir/$node.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -days 7 \
			-extfile "$dir/$node.ext" -out "$dir/$node.pem" 2>/dev/null || return 1
	done
	rm -f "$dir/ca.key" "$dir"/*.csr "$dir"/*.ext "$dir"/*.srl
}
