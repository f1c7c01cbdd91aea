# shellcheck shell=bash
# Shared constants of the real-ZFS harness: versions, package lists, paths, time
# limits. Sourced by the host-side scripts; nothing here has side effects.
#
# The guest image is cached by a hash of the *values* that shape it (see
# image_recipe in build-image.sh), so editing a constant that only concerns the
# test run (csi-sanity version, timeouts) never forces a 10-minute image rebuild.
#
# The constants are read by the scripts that source this file: checked on
# its own, the file uses none of them.
# shellcheck disable=SC2034

# ZFS_VERSION selects the OpenZFS line inside the guest. 2.3 is what we develop
# against (bookworm-backports); 2.1 is bookworm's own 2.1.11, our compatibility floor.
: "${ZFS_VERSION:=2.3}"

DEBIAN_SUITE=bookworm
DEBIAN_MIRROR=http://deb.debian.org/debian
DEBIAN_SECURITY_MIRROR=http://deb.debian.org/debian-security

# Base packages of the guest. systemd/udev: a later issue boots the guest with
# systemd and installs our .deb with apt, so apt/dpkg must keep working too.
# linux-headers-amd64 is what DKMS compiles the ZFS module against. rpm: the
# systemd part installs and erases our .rpm too (rpm --nodeps, since Debian's
# rpm database knows none of the dependencies).
GUEST_PACKAGES=(
	linux-image-amd64 linux-headers-amd64
	systemd systemd-sysv udev kmod util-linux procps
	e2fsprogs xfsprogs btrfs-progs
	rpm
)

# E2E_IMAGE_FLAVOR=cluster (make e2e-k8s, e2e-nomad) adds a node's container runtime: a
# separate cached image, so the other suites' image stays as it is. iptables and
# conntrack serve kube-proxy, iproute2 the network set-up.
if [[ ${E2E_IMAGE_FLAVOR:-} == cluster ]]; then
	GUEST_PACKAGES+=(containerd runc containernetworking-plugins iptables conntrack iproute2)
fi

# The ZFS packages, installed in a second step so that the suite can be chosen
# per version (backports needs "-t"; apt would otherwise keep bookworm's 2.1).
ZFS_PACKAGES=(zfs-dkms zfsutils-linux)

# zfs_apt_target prints the apt release that provides ZFS_VERSION.
zfs_apt_target() {
	case "$ZFS_VERSION" in
	2.3) echo "${DEBIAN_SUITE}-backports" ;;
	2.1) echo "$DEBIAN_SUITE" ;;
	*)
		echo "unsupported ZFS_VERSION=$ZFS_VERSION (use 2.3 or 2.1)" >&2
		return 1
		;;
	esac
}

# Packages the host needs to build and boot the guest (Debian package names).
HOST_PACKAGES=(qemu-system-x86 qemu-utils mmdebstrap e2fsprogs coreutils)
# make e2e-k8s runs the cluster's etcd on the host (Debian's etcd-server) and
# builds the nodes' runc, which needs cgo and libseccomp (k8s/build-k8s.sh).
[[ ${E2E_HOST_ETCD:-} == 1 ]] && HOST_PACKAGES+=(etcd-server gcc libc6-dev pkg-config libseccomp-dev)

# csi-sanity, built from the Go module proxy. One pin for the whole harness;
# v5.6.0 is the newest v5 on the proxy, builds with Go 1.26, and matches the
# csi-test version in go.mod (used by the in-process sanity unit tests).
CSI_SANITY_MODULE=github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity
CSI_SANITY_VERSION=v5.6.0

# Where cached images live: outside the repo, shared by every checkout.
E2E_CACHE="${ZFS_CSI_E2E_CACHE:-${HOME:-/root}/.cache/zfs-csi-e2e}"

# Guest machine shape. TCG only: /dev/kvm exists on these hosts but hangs a guest.
GUEST_CPUS=2
GUEST_MEMORY=4G
GUEST_POOL_SIZE=8G      # sparse file behind the second virtio disk (pool "tank")
GUEST_ROOT_FREE_MB=2048 # free space left on the root disk for later installs

# Overall deadline of one guest run in seconds (boot + suites + poweroff). A
# full `make e2e` guest run measured 33-35 min under TCG with 64 Go tests (the
# Go tests 2,040 s for 52 of them on a loaded host); 60 min leaves room for a
# loaded host and still fits a cold CI run (make test ~7 min, image ~10) in
# CI's 90 minutes.
# The bench gives each of its sections a budget of its own and keeps what
# finished, so its guest gets longer (run.sh): 90 min unless set.
E2E_TIMEOUT_SET=${E2E_TIMEOUT:+yes}
: "${E2E_TIMEOUT:=3600}"

# The bootstrap init baked into the image; it mounts the 9p share and execs
# guest/init.sh from it, so the real init can change without an image rebuild.
GUEST_BOOTSTRAP_INIT=/usr/local/sbin/zfs-csi-e2e-init
GUEST_SHARE_MOUNT=/share
