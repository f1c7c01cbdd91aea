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
#        e2e/k8s/build-k8s.sh runtime the nodes' container runtime: containerd,
#                                    its runc shim and ctr (CONTAINERD_VERSION,
#                                    static) and runc (RUNC_VERSION, with
#                                    seccomp: cgo and Debian's libseccomp-dev)
# K8S_VERSION, CONTAINERD_VERSION, RUNC_VERSION in the env, e2e/k8s/config.sh.
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

# module_copy MODULE@VERSION DEST copies the module's source from the module
# cache (downloading it first) into DEST, writable.
module_copy() {
	local dir
	dir="$(mod_field "$1")"
	[[ -d $dir ]] || die "go mod download $1 gave no directory"
	cp -r "$dir" "$2"
	chmod -R u+w "$2"
}

# kubernetes_source TMP copies k8s.io/kubernetes at K8S_VERSION into TMP/src
# with the published staging modules required in place of ./staging.
kubernetes_source() {
	local staging
	module_copy "k8s.io/kubernetes@$K8S_VERSION" "$1/src"
	rm -f "$1/src/go.work" "$1/src/go.work.sum"
	rm -rf "$1/src/vendor"
	staging="v0.${K8S_VERSION#v1.}" # v1.34.4 → v0.34.4
	# Drop the ./staging replaces; require the published staging modules.
	sed -i -e '/=> \.\/staging\//d' \
		-e "s#^\(\tk8s.io/[a-z0-9-]*\) v0\.0\.0\$#\1 $staging#" "$1/src/go.mod"
}

# build_runtime TMP BIN: containerd's programs (no cgo: static, and the
# btrfs snapshotter, which needs it, is left out; the nodes use overlayfs)
# and runc, which needs cgo for its nsenter and libseccomp for seccomp.
build_runtime() {
	local tmp="$1" bin="$2"
	module_copy "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" "$tmp/containerd"
	log "go build containerd $CONTAINERD_VERSION (containerd, containerd-shim-runc-v2, ctr)"
	(cd "$tmp/containerd" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off go build -trimpath \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
		-o "$bin/" ./cmd/containerd ./cmd/containerd-shim-runc-v2 ./cmd/ctr) ||
		die "go build containerd $CONTAINERD_VERSION failed"
	module_copy "github.com/opencontainers/runc@$RUNC_VERSION" "$tmp/runc"
	log "go build runc $RUNC_VERSION (cgo, seccomp)"
	(cd "$tmp/runc" && CGO_ENABLED=1 GOFLAGS=-mod=mod GOWORK=off go build -trimpath -tags "seccomp urfave_cli_no_docs" \
		-ldflags "-s -w -X main.version=${RUNC_VERSION#v}" -o "$bin/runc" .) ||
		die "go build runc $RUNC_VERSION failed (it needs gcc and libseccomp-dev)"
}

main() {
	local what="${1:-binaries}" out label
	case "$what" in
	binaries) out="$K8S_CACHE/kubernetes-$K8S_VERSION" label="Kubernetes $K8S_VERSION (binaries)" ;;
	e2e) out="$K8S_CACHE/e2e-$K8S_VERSION" label="Kubernetes $K8S_VERSION (e2e)" ;;
	runtime) out="$K8S_CACHE/runtime-containerd-$CONTAINERD_VERSION-runc-$RUNC_VERSION" label="containerd $CONTAINERD_VERSION and runc $RUNC_VERSION" ;;
	*) die "unknown target '$what' (binaries, e2e or runtime)" ;;
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
	local start=$SECONDS
	log "building $label from the module proxy"
	# Global, not local: the EXIT trap runs after main has returned.
	tmp="$(mktemp -d "$K8S_CACHE/.build-$what.XXXXXX")"
	# $tmp is expanded when the trap runs.
	# shellcheck disable=SC2016
	at_exit 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"'
	mkdir -p "$tmp/bin"
	if [[ $what == runtime ]]; then
		build_runtime "$tmp" "$tmp/bin"
	else
		kubernetes_source "$tmp"
		"build_$what" "$tmp/src" "$tmp/bin"
	fi
	rm -rf "$out"
	mkdir -p "$out"
	mv "$tmp/bin"/* "$out/"
	echo "$label" >"$out/.complete"
	log "built $label in $((SECONDS - start)) s into $out"
	echo "$out"
}

main "$@"
