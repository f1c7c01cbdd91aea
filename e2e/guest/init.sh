#!/bin/bash
# init.sh — PID 1 of the e2e guest after the bootstrap init mounted the share.
# Prepares the machine (mounts, udev, ZFS module, pool "tank"), runs the mode the
# host asked for (share/mode: e2e or demo), writes share/results/exit-code and
# powers off. Never `set -e` here: whatever fails, the guest must still report
# and power off instead of letting PID 1 exit (which would panic the kernel).
set -uo pipefail

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LC_ALL=C.UTF-8
SHARE=/share
RESULTS=$SHARE/results
GUEST_DIR=$SHARE/guest
POOL=tank
POOL_DISK=/dev/vdb

# shellcheck source=lib.sh
source "$GUEST_DIR/lib.sh"

power_off() {
	sync
	umount "$SHARE" 2>/dev/null
	echo o >/proc/sysrq-trigger
	sleep 60 # the power-off is asynchronous; PID 1 must not exit meanwhile
}

# finish writes the exit code for the host and powers off. It is the only way out.
finish() {
	local rc="$1"
	say "guest finished with exit code $rc, $(cut -d' ' -f1 /proc/uptime) s after kernel start"
	echo "$rc" >"$RESULTS/exit-code"
	power_off
}

mount_basics() {
	mkdir -p /dev/pts /dev/shm /run /tmp
	mount -t devpts devpts /dev/pts
	mount -t tmpfs tmpfs /dev/shm
	mount -t tmpfs -o mode=0755 tmpfs /run
	mount -t tmpfs tmpfs /tmp
	hostname zfs-csi-e2e
}

# loopback_up brings lo up (the kernel gives it 127.0.0.1), as any booted host
# has it: this init runs in place of systemd, and the image has no ip(8). The
# two-daemon tests talk over the peer channel on 127.0.0.1.
loopback_up() {
	python3 -c '
import fcntl, socket, struct
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0))[:18])[1]
fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
'
}

# start_udev runs udevd so that zvols get their /dev/zvol/<pool>/<name> links;
# the driver and the tests rely on those links exactly as on a real host.
start_udev() {
	/lib/systemd/systemd-udevd --daemon || return 1
	udevadm trigger --action=add
	udevadm settle --timeout=60
}

load_zfs() {
	if ! modprobe zfs; then
		fail "ZFS-MODULE-MISSING: 'modprobe zfs' failed for kernel $(uname -r); the image has no usable zfs.ko"
		return 1
	fi
	say "$(zfs version | tr '\n' ' ')"
}

create_pool() {
	[[ -b $POOL_DISK ]] || {
		fail "no pool disk $POOL_DISK"
		return 1
	}
	# -f: the sparse file is blank, but a rerun reuses it with an old label.
	zpool create -f "$POOL" "$POOL_DISK" || return 1
	zpool list -H "$POOL"
}

main() {
	mount_basics
	mkdir -p "$RESULTS"
	watch_deadline &
	say "guest up $(cut -d' ' -f1 /proc/uptime) s after kernel start: kernel $(uname -r), $(nproc) CPUs, image $(tr '\n' ' ' </etc/zfs-csi-e2e-image)"
	loopback_up || { fail "cannot bring the loopback interface up"; finish 2; }
	start_udev || { fail "systemd-udevd did not start"; finish 2; }
	load_zfs || finish 3
	create_pool || { fail "zpool create failed"; finish 4; }

	local mode
	mode="$(cat "$SHARE/mode" 2>/dev/null || echo e2e)"
	case "$mode" in
	e2e) source "$GUEST_DIR/suites.sh" && run_suites ;;
	demo) source "$GUEST_DIR/demo.sh" && run_demo ;;
	bench) source "$GUEST_DIR/bench.sh" && run_bench ;;
	*) fail "unknown mode '$mode'"; false ;;
	esac
	finish $?
}

# A systemd-booted run (make e2e-systemd, e2e-k8s, e2e-nomad) hands PID 1 to systemd
# instead, before anything here is mounted or started: guest/systemd/boot.sh
# runs guest/<mode>/suite.sh once the system is up.
case "$(cat "$SHARE/mode" 2>/dev/null)" in
systemd | k8s | nomad) exec /bin/bash "$GUEST_DIR/systemd/boot.sh" ;;
esac

main
# Not reached: finish powers off. Keep PID 1 alive if the sysrq failed.
finish 99
