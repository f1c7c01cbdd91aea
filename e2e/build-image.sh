#!/usr/bin/env bash
# build-image.sh — build (or reuse) the cached Debian guest image with ZFS for
# ZFS_VERSION and print the directory that holds disk.img, vmlinuz, initrd.img.
#
# The image lives outside the repo under $E2E_CACHE/<zfs-version>-<hash>, where
# the hash covers everything that shapes the image (this script, the bootstrap
# init, the package lists and mirrors). A rerun with the same recipe is instant.
# The build happens in a temporary directory renamed into place at the very end,
# so an interrupted build never leaves a cache entry that looks complete.
#
# Usage: e2e/build-image.sh [--print-key]      (ZFS_VERSION=2.3|2.1 in the env)
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=config.sh
source "$E2E_DIR/config.sh"
# shellcheck source=traps.sh
source "$E2E_DIR/traps.sh"

log() { echo "[image] $*" >&2; }
die() {
	echo "[image] ERROR: $*" >&2
	exit 1
}

# apt_sources prints the sources.list lines of the guest, one per line.
apt_sources() {
	echo "deb $DEBIAN_MIRROR $DEBIAN_SUITE main contrib"
	echo "deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main contrib"
	echo "deb $DEBIAN_SECURITY_MIRROR $DEBIAN_SUITE-security main contrib"
	if [[ "$(zfs_apt_target)" == *-backports ]]; then
		echo "deb $DEBIAN_MIRROR $DEBIAN_SUITE-backports main contrib"
	fi
}

# image_recipe prints every input of the image; its hash is the cache key.
image_recipe() {
	echo "zfs=$ZFS_VERSION target=$(zfs_apt_target)"
	echo "guest=${GUEST_PACKAGES[*]}"
	echo "zfs-packages=${ZFS_PACKAGES[*]}"
	echo "root-free-mb=$GUEST_ROOT_FREE_MB init=$GUEST_BOOTSTRAP_INIT"
	apt_sources
	cat "$E2E_DIR/build-image.sh" "$E2E_DIR/image/bootstrap-init"
}

image_dir() {
	local key
	key="$(image_recipe | sha256sum | cut -c1-12)"
	echo "$E2E_CACHE/zfs-$ZFS_VERSION-$key"
}

# build_rootfs runs mmdebstrap into $1. The ZFS packages go in a customize step
# after the base install so that "-t <suite>" can pick backports for them, and
# DKMS compiles the module against the guest kernel's headers inside the chroot.
build_rootfs() {
	local rootfs="$1" target
	target="$(zfs_apt_target)"
	local -a sources
	mapfile -t sources < <(apt_sources)
	local include
	include="$(IFS=,; echo "${GUEST_PACKAGES[*]}")"

	mmdebstrap --mode=root --variant=minbase --components=main,contrib \
		--include="$include" \
		--customize-hook="chroot \"\$1\" env DEBIAN_FRONTEND=noninteractive \
			apt-get install -y --no-install-recommends -t $target ${ZFS_PACKAGES[*]}" \
		--customize-hook="\"$E2E_DIR/build-image.sh\" --finish-rootfs \"\$1\"" \
		"$DEBIAN_SUITE" "$rootfs" "${sources[@]}"
}

# finish_rootfs runs inside mmdebstrap's customize step (chroot still mounted):
# makes sure zfs.ko exists for the guest kernel and installs the bootstrap init.
finish_rootfs() {
	local rootfs="$1" kver zfs_src
	kver="$(basename "$(find "$rootfs/lib/modules" -mindepth 1 -maxdepth 1 -type d | sort | tail -1)")"
	[[ -n "$kver" ]] || die "no kernel under $rootfs/lib/modules"
	if [[ -z "$(find "$rootfs/lib/modules/$kver" -name 'zfs.ko*' -print -quit)" ]]; then
		# dkms's postinst may skip kernels other than the running one; ask explicitly.
		zfs_src="$(basename "$(find "$rootfs/usr/src" -maxdepth 1 -name 'zfs-*' | sort | tail -1)")"
		[[ -n "$zfs_src" ]] || die "zfs-dkms left no source under /usr/src"
		log "zfs.ko missing for $kver, running dkms install ${zfs_src/-//} -k $kver"
		chroot "$rootfs" dkms install "${zfs_src/-//}" -k "$kver" ||
			die "DKMS failed to build zfs for $kver (see the make.log under /var/lib/dkms)"
	fi
	[[ -n "$(find "$rootfs/lib/modules/$kver" -name 'zfs.ko*' -print -quit)" ]] ||
		die "zfs.ko was not built for kernel $kver: the guest could not load ZFS"
	chroot "$rootfs" depmod -a "$kver"

	install -m 0755 "$E2E_DIR/image/bootstrap-init" "$rootfs$GUEST_BOOTSTRAP_INIT"
	mkdir -p "$rootfs$GUEST_SHARE_MOUNT"
	echo zfs-csi-e2e >"$rootfs/etc/hostname"
	# For the later systemd boot: a root fs entry and a console login without password.
	echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" >"$rootfs/etc/fstab"
	chroot "$rootfs" passwd -d root >/dev/null
	{
		echo "kernel=$kver"
		# ${Version} is dpkg-query's field, not the shell's.
		# shellcheck disable=SC2016
		echo "zfs-package=$(chroot "$rootfs" dpkg-query -W -f '${Version}' zfsutils-linux)"
		echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	} >"$rootfs/etc/zfs-csi-e2e-image"
}

# make_disk turns the rootfs into a raw ext4 image without loop mounts and copies
# the kernel and initrd out for direct kernel boot.
make_disk() {
	local rootfs="$1" out="$2" used_mb kver
	kver="$(sed -n 's/^kernel=//p' "$rootfs/etc/zfs-csi-e2e-image")"
	cp "$rootfs/boot/vmlinuz-$kver" "$out/vmlinuz"
	cp "$rootfs/boot/initrd.img-$kver" "$out/initrd.img"
	cp "$rootfs/etc/zfs-csi-e2e-image" "$out/info"
	used_mb="$(du -sm --apparent-size "$rootfs" | cut -f1)"
	truncate -s "$((used_mb * 12 / 10 + GUEST_ROOT_FREE_MB))M" "$out/disk.img"
	mkfs.ext4 -q -F -L zfs-csi-root -d "$rootfs" "$out/disk.img"
}

main() {
	case "${1:-}" in
	--finish-rootfs)
		finish_rootfs "$2"
		return
		;;
	--print-key)
		image_dir
		return
		;;
	esac

	local dir
	dir="$(image_dir)"
	if [[ -f "$dir/disk.img" ]]; then
		log "reusing $dir"
		echo "$dir"
		return
	fi
	for tool in mmdebstrap mkfs.ext4; do
		command -v "$tool" >/dev/null || die "$tool is missing (run e2e/host-deps.sh)"
	done
	mkdir -p "$E2E_CACHE"
	# One builder per recipe: a second caller waits, then finds the finished image.
	exec {lock_fd}>"$dir.lock"
	flock "$lock_fd"
	if [[ -f "$dir/disk.img" ]]; then
		echo "$dir"
		return
	fi

	local tmp start=$SECONDS
	tmp="$(mktemp -d "$E2E_CACHE/.build-zfs-$ZFS_VERSION.XXXXXX")"
	# --one-file-system: never follow a mount mmdebstrap may have left behind.
	# $tmp is expanded when the trap runs.
	# shellcheck disable=SC2016
	at_exit 'rm -rf --one-file-system "$tmp"'
	log "building ZFS $ZFS_VERSION guest image in $tmp (about 10 minutes)"
	build_rootfs "$tmp/rootfs" >&2
	make_disk "$tmp/rootfs" "$tmp"
	rm -rf --one-file-system "$tmp/rootfs"
	mv -T "$tmp" "$dir"
	trap - EXIT
	log "built $dir in $((SECONDS - start)) s: $(tr '\n' ' ' <"$dir/info")"
	echo "$dir"
}

main "$@"
