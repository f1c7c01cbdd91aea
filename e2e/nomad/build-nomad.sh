#!/usr/bin/env bash
# build-nomad.sh — build (or reuse) the nomad binary of the e2e-nomad cluster
# from the Go module proxy and print its path.
#
# Only Nomad's MPL-2.0 line is used: a NOMAD_VERSION of 1.7 or later (BUSL)
# is refused before anything is downloaded, and the module zip's LICENSE (and
# the api module's) must read MPL-2.0, or nothing is built. A cached binary
# of a refused version is deleted.
#
# github.com/hashicorp/nomad replaces its api module with ./api, which the
# module zip does not hold. The build runs in a copy whose go.mod requires the
# published api module instead (NOMAD_API_VERSION, config.sh says why that
# one); Go resolves the rest (MVS may raise a few of Nomad's requirements to
# what that api requires). No Nomad source is changed. Cached outside the
# repo, keyed by both versions, like the guest image.
#
# Usage: e2e/nomad/build-nomad.sh        (NOMAD_VERSION in the env, config.sh)
set -euo pipefail

NOMAD_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=config.sh
source "$NOMAD_DIR/config.sh"
# shellcheck source=../traps.sh
source "$NOMAD_DIR/../traps.sh"

log() { echo "[nomad-build] $*" >&2; }
die() {
	echo "[nomad-build] ERROR: $*" >&2
	exit 1
}

# open_source VERSION: whether Nomad VERSION (vX.Y.Z[-pre]) is of the MPL-2.0
# line, before 1.7. A 1.7 pre-release is BUSL too.
open_source() {
	[[ $1 =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)(-[0-9A-Za-z.-]+)?$ ]] || return 1
	local major=$((10#${BASH_REMATCH[1]})) minor=$((10#${BASH_REMATCH[2]}))
	((major < 1 || (major == 1 && minor < 7)))
}

# check_licence MODULE VERSION ZIP: the LICENSE at the root of the module zip
# is the Mozilla Public License 2.0.
check_licence() {
	local text
	text="$(unzip -p "$3" "$1@$2/LICENSE")" || die "$1@$2: no LICENSE in $3"
	if ! grep -q '^Mozilla Public License, version 2\.0$' <<<"$text" || grep -qi 'Business Source License' <<<"$text"; then
		die "$1@$2: its LICENSE is not MPL-2.0 ($(grep -m1 -v '^[[:space:]]*$' <<<"$text")); this project uses only open-source Nomad"
	fi
}

# download MODULE VERSION: go mod download it, check its licence, print the
# extracted directory.
download() {
	local json dir zip
	json="$(cd / && GOFLAGS='' go mod download -json "$1@$2")" || die "go mod download $1@$2 failed"
	dir="$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$json")"
	zip="$(sed -n 's/^\t"Zip": "\(.*\)",$/\1/p' <<<"$json")"
	[[ -d $dir && -f $zip ]] || die "go mod download $1@$2 gave no directory or zip"
	check_licence "$1" "$2" "$zip"
	echo "$dir"
}

main() {
	command -v unzip >/dev/null || die "unzip is needed to read the module zips' LICENSE"
	local stale
	for stale in "$NOMAD_CACHE"/nomad-v*; do
		[[ -e $stale && $stale != *.lock ]] || continue
		stale="${stale#"$NOMAD_CACHE"/nomad-}"
		open_source "${stale%%+*}" || { log "deleting the cached binary of BUSL Nomad ${stale%%+*}"; rm -f "$NOMAD_CACHE/nomad-$stale"; }
	done
	open_source "$NOMAD_VERSION" ||
		die "NOMAD_VERSION=$NOMAD_VERSION: only Nomad's MPL-2.0 releases, before v1.7.0, may be used (v1.7.0 and later are BUSL)"
	local out="$NOMAD_CACHE/nomad-$NOMAD_VERSION+api-${NOMAD_API_VERSION##*-}"
	[[ -x $out ]] && { echo "$out"; return; }
	mkdir -p "$NOMAD_CACHE"
	exec {lock_fd}>"$out.lock"
	flock "$lock_fd"
	[[ -x $out ]] && { echo "$out"; return; }
	local start=$SECONDS src
	log "building Nomad $NOMAD_VERSION (api $NOMAD_API_VERSION) from the module proxy (~10 min on 2 cores)"
	src="$(download github.com/hashicorp/nomad "$NOMAD_VERSION")"
	download github.com/hashicorp/nomad/api "$NOMAD_API_VERSION" >/dev/null
	# Global, not local: the EXIT trap runs after main has returned.
	tmp="$(mktemp -d "$NOMAD_CACHE/.build-nomad.XXXXXX")"
	# $tmp is expanded when the trap runs.
	# shellcheck disable=SC2016
	at_exit 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"'
	cp -r "$src" "$tmp/src"
	chmod -R u+w "$tmp/src"
	rm -rf "$tmp/src/vendor"
	sed -i -e '/^replace github.com\/hashicorp\/nomad\/api => \.\/api$/d' \
		-e "s#^\(\tgithub.com/hashicorp/nomad/api\) v.*\$#\1 $NOMAD_API_VERSION#" "$tmp/src/go.mod"
	if ! grep -q "github.com/hashicorp/nomad/api $NOMAD_API_VERSION" "$tmp/src/go.mod" || grep -q '=> \./api' "$tmp/src/go.mod"; then
		die "Nomad $NOMAD_VERSION's go.mod does not require the api as expected; update build-nomad.sh"
	fi
	# With cgo, as HashiCorp builds it: the exec driver's executor joins its
	# namespaces through libcontainer's nsenter, which is C. The guest has the
	# host's Debian, so the glibc it links against is there.
	(cd "$tmp/src" && CGO_ENABLED=1 GOFLAGS=-mod=mod GOWORK=off \
		go build -trimpath -ldflags "-s -w" -o "$tmp/nomad" .) || die "go build of Nomad $NOMAD_VERSION failed"
	"$tmp/nomad" version | grep "^Nomad $NOMAD_VERSION\$" >/dev/null ||
		die "the binary built is not Nomad $NOMAD_VERSION: $("$tmp/nomad" version | sed -n 1p)"
	mv "$tmp/nomad" "$out"
	log "built Nomad $NOMAD_VERSION in $((SECONDS - start)) s: $out"
	echo "$out"
}

main "$@"
