#!/usr/bin/env bash
# build-k8s.sh — build (or reuse) the Kubernetes binaries of the e2e-k8s cluster
# from the Go module proxy and print the directory that holds them.
#
# k8s.io/kubernetes points its k8s.io/* staging modules at ./staging/..., which
# the module zip does not hold. The build runs in a copy whose go.mod requires
# the published k8s.io/* v0.X.Y modules instead (k8s.io/utils and
# k8s.io/kube-openapi keep their pseudo-versions). Cached outside the repo,
# keyed by version, like the guest image.
#
# Usage: e2e/k8s/build-k8s.sh        the cluster's binaries (K8S_BINARIES)
#        e2e/k8s/build-k8s.sh e2e    e2e.test (the upstream e2e suite, ./test/e2e),
#                                    its agnhost test program, and ginkgo at the
#                                    version k8s.io/kubernetes requires
#                                    (make e2e-k8s-conformance)
# K8S_VERSION in the env, e2e/k8s/config.sh.
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=config.sh
source "$K8S_DIR/config.sh"
# shellcheck source=../traps.sh
source "$K8S_DIR/../traps.sh"

log() { echo "[k8s-build] $*" >&2; }
die() {
	echo "[k8s-build] ERROR: $*" >&2
	exit 1
}

# gobuild DIR ARGS... runs go in the module copy DIR with the version stamped
# as the release build does it.
gobuild() {
	local dir="$1" minor ldflags="-s -w"
	shift
	minor="${K8S_VERSION#v1.}"
	minor="${minor%%.*}"
	ldflags+=" -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
	ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
	ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
	ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
	(cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off go "$1" -trimpath -ldflags "$ldflags" "${@:2}")
}

# build_binaries SRC BIN: the cluster's own programs.
build_binaries() {
	local b
	for b in "${K8S_BINARIES[@]}"; do
		log "go build ./cmd/$b"
		gobuild "$1" build -o "$2/$b" "./cmd/$b" || die "go build ./cmd/$b failed"
	done
}

# build_e2e SRC BIN: e2e.test, agnhost (the program of the suite's agnhost
# image, which no registry serves here), and ginkgo at the version SRC's go.mod
# requires (ginkgo runs e2e.test in parallel processes; the two must agree).
build_e2e() {
	local ginkgo
	ginkgo="$(sed -n 's#^\tgithub.com/onsi/ginkgo/v2 \(v[^ ]*\)$#\1#p' "$1/go.mod")"
	[[ -n $ginkgo ]] || die "k8s.io/kubernetes@$K8S_VERSION's go.mod requires no github.com/onsi/ginkgo/v2"
	log "go test -c ./test/e2e (the largest build: ~20 min on 2 cores)"
	gobuild "$1" test -c -o "$2/e2e.test" ./test/e2e || die "go test -c ./test/e2e failed"
	log "go build ./test/images/agnhost"
	gobuild "$1" build -o "$2/agnhost" ./test/images/agnhost || die "go build ./test/images/agnhost failed"
	log "go build github.com/onsi/ginkgo/v2/ginkgo ($ginkgo)"
	gobuild "$1" build -o "$2/ginkgo" github.com/onsi/ginkgo/v2/ginkgo || die "go build ginkgo failed"
	echo "$ginkgo" >"$2/ginkgo.version"
}

main() {
	local what="${1:-binaries}" out
	case "$what" in
	binaries) out="$K8S_CACHE/kubernetes-$K8S_VERSION" ;;
	e2e) out="$K8S_CACHE/e2e-$K8S_VERSION" ;;
	*) die "unknown target '$what' (binaries or e2e)" ;;
	esac
	if [[ -f $out/.complete ]]; then
		echo "$out"
		return
	fi
	mkdir -p "$K8S_CACHE"
	exec {lock_fd}>"$out.lock"
	flock "$lock_fd"
	if [[ -f $out/.complete ]]; then
		echo "$out"
		return
	fi
	local start=$SECONDS src staging
	log "building Kubernetes $K8S_VERSION ($what) from the module proxy"
	src="$(mod_field "k8s.io/kubernetes@$K8S_VERSION")"
	[[ -d $src ]] || die "go mod download k8s.io/kubernetes@$K8S_VERSION gave no directory"
	# Global, not local: the EXIT trap runs after main has returned.
	tmp="$(mktemp -d "$K8S_CACHE/.build-$what.XXXXXX")"
	# $tmp is expanded when the trap runs.
	# shellcheck disable=SC2016
	at_exit 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"'
	cp -r "$src" "$tmp/src"
	chmod -R u+w "$tmp/src"
	rm -f "$tmp/src/go.work" "$tmp/src/go.work.sum"
	rm -rf "$tmp/src/vendor"
	staging="v0.${K8S_VERSION#v1.}" # v1.34.4 → v0.34.4
	# Drop the ./staging replaces; require the published staging modules.
	sed -i -e '/=> \.\/staging\//d' \
		-e "s#^\(\tk8s.io/[a-z0-9-]*\) v0\.0\.0\$#\1 $staging#" "$tmp/src/go.mod"
	mkdir -p "$tmp/bin"
	"build_$what" "$tmp/src" "$tmp/bin"
	rm -rf "$out"
	mkdir -p "$out"
	mv "$tmp/bin"/* "$out/"
	echo "$K8S_VERSION" >"$out/.complete"
	log "built Kubernetes $K8S_VERSION ($what) in $((SECONDS - start)) s into $out"
	echo "$out"
}

main "$@"
