# shellcheck shell=bash
# peer-certs.sh — what an operator gives the daemons for their peer channel
# (docs/across-nodes.md), made for the two-node harnesses (e2e-nomad, e2e-k8s). Sourced;
# nothing here has side effects.

# peer_certs DIR NODE... writes DIR/ca.pem, a CA made for this run, and for
# each NODE DIR/NODE.pem and DIR/NODE.key: a certificate from that CA naming
# the node in the URI SAN urn:zfs-csi:node:NODE, for server and client
# authentication. Test-only: the keys travel through the share; a real
# cluster keeps each node's key on that node.
peer_certs() {
	local dir="$1" node
	shift
	rm -rf "$dir" && mkdir -p "$dir" || return 1
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
		-subj /CN=zfs-csi-e2e-peers -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null || return 1
	for node in "$@"; do
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$node" \
			-keyout "$dir/$node.key" -out "$dir/$node.csr" 2>/dev/null || return 1
		printf 'subjectAltName=URI:urn:zfs-csi:node:%s\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature\n' "$node" >"$dir/$node.ext"
		openssl x509 -req -in "$dir/$node.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -days 7 \
			-extfile "$dir/$node.ext" -out "$dir/$node.pem" 2>/dev/null || return 1
	done
	rm -f "$dir/ca.key" "$dir"/*.csr "$dir"/*.ext "$dir"/*.srl
}
