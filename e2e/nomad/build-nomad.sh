#!/usr/bin/env bash
# build-nomad.sh — build (or reuse) the nomad binary of the e2e-nomad cluster
# from the Go module proxy and print its path.
#
# github.com/hashicorp/nomad replaces its api module with ./api, which the
# module zip does not hold. The build runs in a copy whose go.mod requires the
# published api module instead (NOMAD_API_VERSION). Cached outside the repo,
# keyed by version, like the guest image.
#
# Usage: e2e/nomad/build-nomad.sh        (NOMAD_VERSION in the env, config.sh)
set -euo pipefail

NOMAD_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=config.sh
source "$NOMAD_DIR/config.sh"

log() { echo "[nomad-build] $*" >&2; }
die() {
	echo "[nomad-build] ERROR: $*" >&2
	exit 1
}

main() {
	local out="$NOMAD_CACHE/nomad-$NOMAD_VERSION"
	[[ -x $out ]] && { echo "$out"; return; }
	mkdir -p "$NOMAD_CACHE"
	exec {lock_fd}>"$out.lock"
	flock "$lock_fd"
	[[ -x $out ]] && { echo "$out"; return; }
	local start=$SECONDS src
	log "building Nomad $NOMAD_VERSION from the module proxy (~10 min on 2 cores)"
	src="$(cd / && go mod download -json "github.com/hashicorp/nomad@$NOMAD_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
	[[ -d $src ]] || die "go mod download github.com/hashicorp/nomad@$NOMAD_VERSION gave no directory"
	# Global, not local: the EXIT trap runs after main has returned.
	tmp="$(mktemp -d "$NOMAD_CACHE/.build-nomad.XXXXXX")"
	trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
	cp -r "$src" "$tmp/src"
	chmod -R u+w "$tmp/src"
	rm -rf "$tmp/src/vendor"
	sed -i -e '/^replace github.com\/hashicorp\/nomad\/api => \.\/api$/d' \
		-e "s#^\(\tgithub.com/hashicorp/nomad/api\) v.*\$#\1 $NOMAD_API_VERSION#" "$tmp/src/go.mod"
	grep -q "github.com/hashicorp/nomad/api $NOMAD_API_VERSION" "$tmp/src/go.mod" ||
		die "Nomad $NOMAD_VERSION's go.mod does not require the api as expected; update build-nomad.sh"
	# With cgo, as HashiCorp builds it: the exec driver's executor joins its
	# namespaces through libcontainer's nsenter, which is C. The guest has the
	# host's Debian, so the glibc it links against is there.
	(cd "$tmp/src" && CGO_ENABLED=1 GOFLAGS=-mod=mod GOWORK=off \
		go build -trimpath -ldflags "-s -w" -o "$tmp/nomad" .) || die "go build of Nomad $NOMAD_VERSION failed"
	mv "$tmp/nomad" "$out"
	log "built Nomad $NOMAD_VERSION in $((SECONDS - start)) s: $out"
	echo "$out"
}

main "$@"
