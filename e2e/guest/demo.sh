# shellcheck shell=bash
# The `make demo` tour, run inside the guest by init.sh: the driver on a real
# pool, driven by its own CSI client (`zfs-csi ctl`): volumes of both kinds,
# data written to them, a snapshot, clones, and what an operator sees with
# `zfs list`. Each step prints what it does.
#
# Data is written the way ZFS shows it, without the Node service: the dataset
# (mountpoint=legacy) mounted by hand, the zvol written through its /dev/zvol
# link.

DEMO_PARENT=$POOL/csi

demo_step() {
	echo
	say "DEMO: $*"
}

# show runs a command after printing it, so the tour reads like a terminal session.
show() {
	echo "# $*"
	"$@"
}

# ctl calls the demo's daemon; `ctl -o id …` prints only the new volume's or
# snapshot's ID.
ctl() { "$SHARE/zfs-csi" ctl --endpoint "unix://$DRIVER_SOCKET" "$@"; }

# dataset_of prints the ZFS name inside a volume or snapshot ID (<node>:<name>).
dataset_of() { echo "${1#*:}"; }

zfs_overview() {
	show zfs list -r -t all -o name,used,refquota,volsize,origin,zfs.csi.dev:csi-name "$DEMO_PARENT"
}

demo_tour() {
	demo_step "start the driver on pool $POOL, parent dataset $DEMO_PARENT"
	start_driver "$DEMO_PARENT" || return 1
	show ctl info || return 1

	demo_step "create a 256 MiB filesystem volume (a ZFS dataset with refquota) and a 128 MiB block volume (a zvol)"
	local fs_volume block_volume
	fs_volume="$(ctl -o id create-volume demo-files --size 256Mi)" || return 1
	block_volume="$(ctl -o id create-volume demo-block --size 128Mi --block)" || return 1
	echo "filesystem volume: $fs_volume"
	echo "block volume:      $block_volume"
	zfs_overview

	demo_step "write data: a file into the dataset, 4 MiB of random bytes onto the zvol"
	local fs_dataset block_zvol
	fs_dataset="$(dataset_of "$fs_volume")"
	block_zvol="/dev/zvol/$(dataset_of "$block_volume")"
	mkdir -p /mnt/demo
	show mount -t zfs "$fs_dataset" /mnt/demo || return 1
	echo "hello from zfs-csi at $(date -u +%FT%TZ)" >/mnt/demo/hello.txt
	show cat /mnt/demo/hello.txt
	umount /mnt/demo
	udevadm settle --timeout=30
	show dd if=/dev/urandom of="$block_zvol" bs=1M count=4 conv=fsync status=none || return 1
	local block_sum
	block_sum="$(head -c 4M "$block_zvol" | sha256sum | cut -d' ' -f1)"
	echo "sha256 of the first 4 MiB: $block_sum"

	demo_step "snapshot both volumes"
	local fs_snapshot block_snapshot
	fs_snapshot="$(ctl -o id create-snapshot demo-files-snap "$fs_volume")" || return 1
	block_snapshot="$(ctl -o id create-snapshot demo-block-snap "$block_volume")" || return 1
	echo "snapshots: $fs_snapshot  $block_snapshot"

	demo_step "clone new volumes from the snapshots (zfs clone: instant, shares blocks)"
	local fs_clone block_clone
	fs_clone="$(ctl -o id create-volume demo-files-clone --size 256Mi --from-snapshot "$fs_snapshot")" || return 1
	block_clone="$(ctl -o id create-volume demo-block-clone --size 128Mi --block --from-snapshot "$block_snapshot")" || return 1
	echo "clones: $fs_clone  $block_clone"

	demo_step "the clones hold the data"
	show mount -t zfs "$(dataset_of "$fs_clone")" /mnt/demo || return 1
	show cat /mnt/demo/hello.txt || return 1
	umount /mnt/demo
	udevadm settle --timeout=30
	local clone_sum
	clone_sum="$(head -c 4M "/dev/zvol/$(dataset_of "$block_clone")" | sha256sum | cut -d' ' -f1)"
	echo "sha256 of the clone's first 4 MiB: $clone_sum"
	[[ $clone_sum == "$block_sum" ]] || {
		fail "the block clone differs from its source"
		return 1
	}

	demo_step "what the CO sees: ListVolumes and ListSnapshots"
	show ctl list-volumes
	show ctl list-snapshots

	demo_step "what an operator sees: everything is in ZFS, with the CSI names as user properties"
	zfs_overview
}

run_demo() {
	local rc=0
	demo_tour || rc=1
	stop_driver
	if [[ $rc -eq 0 ]]; then
		echo "PASS demo" >>"$RESULTS/summary.txt"
		say "demo finished"
	else
		echo "FAIL demo" >>"$RESULTS/summary.txt"
		fail "demo failed"
	fi
	return "$rc"
}
