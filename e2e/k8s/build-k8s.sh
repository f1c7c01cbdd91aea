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
# Usage: e2e/k8s/build-k8s.sh        (K8S_VERSION in the env, e2e/k8s/config.sh)
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=config.sh
source "$K8S_DIR/config.sh"

log() { echo "[k8s-build] $*" >&2; }
die() {
	echo "[k8s-build] ERROR: $*" >&2
	exit 1
}

main() {
	local out="$K8S_CACHE/kubernetes-$K8S_VERSION"
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
	local start=$SECONDS src minor staging
	log "building Kubernetes $K8S_VERSION (${K8S_BINARIES[*]}) from the module proxy (~10 min on 2 cores)"
	src="$(cd / && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
	[[ -d $src ]] || die "go mod download k8s.io/kubernetes@$K8S_VERSION gave no directory"
	# Global, not local: the EXIT trap runs after main has returned.
	tmp="$(mktemp -d "$K8S_CACHE/.build-kubernetes.XXXXXX")"
	trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
	cp -r "$src" "$tmp/src"
	chmod -R u+w "$tmp/src"
	rm -f "$tmp/src/go.work" "$tmp/src/go.work.sum"
	rm -rf "$tmp/src/vendor"
	staging="v0.${K8S_VERSION#v1.}" # v1.34.4 → v0.34.4
	# Drop the ./staging replaces; require the published staging modules.
	sed -i -e '/=> \.\/staging\//d' \
		-e "s#^\(\tk8s.io/[a-z0-9-]*\) v0\.0\.0\$#\1 $staging#" "$tmp/src/go.mod"
	minor="${K8S_VERSION#v1.}"
	minor="${minor%%.*}"
	local ldflags="-s -w"
	ldflags+=" -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
	ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
	ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
	ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
	mkdir -p "$tmp/bin"
	local b
	for b in "${K8S_BINARIES[@]}"; do
		log "go build ./cmd/$b"
		(cd "$tmp/src" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off \
			go build -trimpath -ldflags "$ldflags" -o "$tmp/bin/$b" "./cmd/$b") ||
			die "go build ./cmd/$b failed"
	done
	rm -rf "$out"
	mkdir -p "$out"
	mv "$tmp/bin"/* "$out/"
	echo "$K8S_VERSION" >"$out/.complete"
	log "built Kubernetes $K8S_VERSION in $((SECONDS - start)) s into $out"
	echo "$out"
}

main "$@"
