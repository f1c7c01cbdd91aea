#!/usr/bin/env bash
# build-images.sh — build (or reuse) the container images of the e2e-k8s
# cluster as docker-archive tarballs and print the directory that holds them.
#
# No registry is reachable, so every image is made here: the sidecars at the
# exact references the shipped manifests pin (built from their Go modules, the
# opt-in external-snapshot-metadata sidecar's too), the cluster's
# snapshot-controller at the csi-snapshotter's version, upstream's
# snapshot-metadata-lister at the sidecar's version (a backup client), the pod
# sandbox (cmd/pause) and a busybox workload image from Debian's busybox-static.
# The guest imports them into containerd under those names, so the manifests
# apply unchanged. Each tarball is cached by its image reference; the script
# prints the tarballs of this run, one path per line.
#
# Usage: e2e/k8s/build-images.sh
set -euo pipefail

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$K8S_DIR/../.." && pwd)"
# shellcheck source=config.sh
source "$K8S_DIR/config.sh"
OUT="$K8S_CACHE/images"
BIN="$K8S_CACHE/bin"

log() { echo "[k8s-images] $*" >&2; }
die() {
	echo "[k8s-images] ERROR: $*" >&2
	exit 1
}

# tool NAME builds one of e2e/k8s/cmd into $BIN (cheap when unchanged).
tool() {
	(cd "$K8S_DIR" && CGO_ENABLED=0 go build -o "$BIN/$1" "./cmd/$1") || die "cannot build e2e/k8s/cmd/$1"
	echo "$BIN/$1"
}

# sidecar_module NAME TAG prints "<module> <package>" of a kubernetes-csi image.
sidecar_module() {
	local major="${2%%.*}"
	case "$1" in
	csi-provisioner) echo "github.com/kubernetes-csi/external-provisioner/$major ./cmd/csi-provisioner" ;;
	csi-snapshotter) echo "github.com/kubernetes-csi/external-snapshotter/$major ./cmd/csi-snapshotter" ;;
	snapshot-controller) echo "github.com/kubernetes-csi/external-snapshotter/$major ./cmd/snapshot-controller" ;;
	csi-resizer) echo "github.com/kubernetes-csi/external-resizer/$major ./cmd/csi-resizer" ;;
	# v0: no major suffix. The lister is upstream's example client, the
	# ChangedBlocks scenario's backup application.
	csi-snapshot-metadata) echo "github.com/kubernetes-csi/external-snapshot-metadata ./cmd/csi-snapshot-metadata" ;;
	snapshot-metadata-lister) echo "github.com/kubernetes-csi/external-snapshot-metadata ./examples/snapshot-metadata-lister" ;;
	*) return 1 ;;
	esac
}

# build_sidecar NAME TAG builds the sidecar's static binary from its module at
# TAG and prints its path. Like Kubernetes itself, the module is built in a
# copy: replaces of local directories (the snapshotter's ./client, a nested
# module the zip lacks) point at the published module of the same version.
# external-snapshot-metadata's ./client is published at its own versions, not
# the sidecar's: its replace is dropped, and go.mod's require line (client
# v0.1.0 for v0.2.0) picks it from the proxy.
build_sidecar() {
	local name="$1" tag="$2" mod pkg src tmp bin="$BIN/$1-$2"
	if [[ -x $bin ]]; then
		echo "$bin"
		return
	fi
	read -r mod pkg < <(sidecar_module "$name" "$tag") || die "no module known for image $name"
	log "building $name $tag from $mod"
	src="$(mod_field "$mod@$tag")"
	[[ -d $src ]] || die "go mod download $mod@$tag failed"
	tmp="$(mktemp -d "$K8S_CACHE/.build-$name.XXXXXX")"
	cp -r "$src" "$tmp/src"
	chmod -R u+w "$tmp/src"
	rm -rf "$tmp/src/vendor"
	sed -i "s#^replace \(github.com/kubernetes-csi/external-snapshotter/client/$(basename "$mod")\) => \./client\$#replace \1 => \1 $tag#" "$tmp/src/go.mod"
	if grep -q '^replace github.com/kubernetes-csi/external-snapshot-metadata/client => \./client$' "$tmp/src/go.mod"; then
		(cd "$tmp/src" && go mod edit -dropreplace=github.com/kubernetes-csi/external-snapshot-metadata/client) ||
			die "cannot drop the ./client replace of $mod@$tag"
	fi
	if ! (cd "$tmp/src" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off \
		go build -trimpath -ldflags "-s -w -X main.version=$tag" -o "$bin.tmp" "$pkg") >&2; then
		rm -rf "$tmp"
		die "go build $pkg of $mod@$tag failed"
	fi
	rm -rf "$tmp"
	mv "$bin.tmp" "$bin"
	echo "$bin"
}

# image REF ARGS... writes the tarball of REF unless it is cached.
image() {
	local ref="$1" file
	shift
	file="$OUT/$(echo "$ref" | tr '/:' '__').tar"
	IMAGES+=("$file")
	[[ -f $file ]] && return
	log "image $ref"
	"$OCIIMAGE" -o "$file" -name "$ref" "$@" || die "cannot write image $ref"
}

# busybox prints the path of Debian's busybox-static binary, fetched once.
busybox() {
	local bb="$BIN/busybox"
	if [[ ! -x $bb ]]; then
		local tmp
		tmp="$(mktemp -d)"
		(cd "$tmp" && apt-get download -q busybox-static >&2) || die "apt-get download busybox-static failed"
		dpkg-deb -x "$tmp"/busybox-static_*.deb "$tmp/root"
		install -m 0755 "$tmp/root/bin/busybox" "$bb"
		rm -rf "$tmp"
	fi
	echo "$bb"
}

IMAGES=()

main() {
	mkdir -p "$OUT" "$BIN"
	# One build at a time: two would rename each other's .tmp files away.
	exec {lock_fd}>"$K8S_CACHE/images.lock"
	flock "$lock_fd"
	OCIIMAGE="$(tool ociimage)"
	local ref name tag snaptag="" metatag=""
	while read -r ref; do
		name="${ref##*/}"
		tag="${name#*:}"
		name="${name%%:*}"
		[[ $name == csi-snapshotter ]] && snaptag="$tag"
		[[ $name == csi-snapshot-metadata ]] && metatag="$tag"
		image "$ref" -entrypoint "/$name" "/$name=$(build_sidecar "$name" "$tag")"
	done < <(sed -n 's/^ *image: *//p' "$REPO/packaging/kubernetes/30-sidecars.yaml" "$REPO/$SNAPSHOT_METADATA_MANIFEST")
	[[ -n $snaptag ]] || die "no csi-snapshotter in the manifests: which snapshot-controller?"
	image "$(snapshot_controller_image "$snaptag")" -entrypoint /snapshot-controller \
		"/snapshot-controller=$(build_sidecar snapshot-controller "$snaptag")"
	[[ -n $metatag ]] || die "no csi-snapshot-metadata in $SNAPSHOT_METADATA_MANIFEST: which lister?"
	image "$(snapshot_metadata_lister_image "$metatag")" -entrypoint /snapshot-metadata-lister \
		"/snapshot-metadata-lister=$(build_sidecar snapshot-metadata-lister "$metatag")"
	image "$PAUSE_IMAGE" -entrypoint /pause "/pause=$(tool pause)"
	image "$WORKLOAD_IMAGE" -entrypoint /bin/sh -link-applets "$(busybox)" "/bin/busybox=$(busybox)"
	printf '%s\n' "${IMAGES[@]}"
}

main "$@"
