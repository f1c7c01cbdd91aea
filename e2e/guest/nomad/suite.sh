#!/bin/bash
# suite.sh — one host of the make e2e-nomad cluster, run by zfs-csi-e2e.service
# on a systemd-booted guest (see ../systemd/boot.sh). Two guests run it at
# once, joined by a point-to-point link (qemu socket network):
#
#   guest a  192.168.77.1  node-a: Nomad server and client, zfs-csi; runs the
#            scenarios (e2e/nomad/suite) and tells b when they are done
#   guest b  192.168.77.2  node-b: Nomad client, zfs-csi; publishes its
#            `zfs list` into the share for a's scenarios until a is done
#
# Each is set up the way README.md tells an administrator: its own pool and
# parent dataset, our .deb with the host name as node ID, a Nomad agent with
# the host volume "zfs-csi" for the daemon's socket directory. Results of b go
# to results/b.
set -uo pipefail

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive
SHARE=/share
GUEST_DIR=$SHARE/guest
NOMAD=$SHARE/nomad
ROLE=a
grep -q 'zfs_csi_e2e.guest=b' /proc/cmdline && ROLE=b
RESULTS=$SHARE/results
[[ $ROLE == b ]] && RESULTS=$SHARE/results/b
NODE=node-$ROLE
SERVER_IP=192.168.77.1
POOL=tank
WORK=/tmp/e2e-nomad
DONE=$SHARE/results/scenarios-done

# shellcheck source=../lib.sh
source "$GUEST_DIR/lib.sh"

step_network() {
	local ip=192.168.77.1
	[[ $ROLE == b ]] && ip=192.168.77.2
	hostnamectl set-hostname "$NODE" 2>/dev/null || hostname "$NODE"
	mkdir -p /etc/systemd/network
	cat >/etc/systemd/network/10-peer.network <<NET
[Match]
Type=ether
[Network]
Address=$ip/24
NET
	systemctl restart systemd-networkd || return 1
	local dev
	dev="$(peer_interface)"
	wait_for 60 "$dev up" grep -qx up "/sys/class/net/$dev/operstate" || return 1
	STEP_NOTE="$NODE $ip on $dev"
}

step_driver() {
	zpool create -f "$POOL" /dev/vdb && zfs create "$POOL/csi" || return 1
	mkdir -p "$WORK"
	cp "$SHARE"/zfs-csi_*_amd64.deb "$WORK/" || return 1
	(cd "$WORK" && apt-get install -y -q ./zfs-csi_*_amd64.deb) >"$RESULTS/apt-install.log" 2>&1 ||
		{ tail -20 "$RESULTS/apt-install.log"; return 1; }
	# As README.md says: the parent dataset; the node ID is the host name.
	set_option ZFS_CSI_PARENT_DATASETS "$POOL/csi"
	set_option ZFS_CSI_LOG_LEVEL debug
	systemctl restart zfs-csi || { systemctl status zfs-csi --no-pager; return 1; }
	STEP_NOTE="$(dpkg-query -W -f '${Version}' zfs-csi), $(zfs version | head -1)"
}

step_agent() {
	install -m 0755 "$NOMAD/nomad" /usr/local/bin/nomad || return 1
	mkdir -p /etc/nomad.d /opt/nomad/data
	local server=""
	[[ $ROLE == a ]] && server='server {
  enabled          = true
  bootstrap_expect = 1
}'
	cat >/etc/nomad.d/nomad.hcl <<HCL
data_dir  = "/opt/nomad/data"
name      = "$NODE"
bind_addr = "0.0.0.0"
advertise {
  http = "{{ GetInterfaceIP \"$(peer_interface)\" }}"
  rpc  = "{{ GetInterfaceIP \"$(peer_interface)\" }}"
  serf = "{{ GetInterfaceIP \"$(peer_interface)\" }}"
}
$server
client {
  enabled           = true
  servers           = ["$SERVER_IP:4647"]
  network_interface = "$(peer_interface)"
  # What zfs-csi.nomad.hcl asks for (its bridge runs as root), and the
  # scenarios' workloads, which stand in for containers and write as root.
  options {
    "user.denylist" = "Administrator"
  }
}
# What zfs-csi-raw-exec.nomad.hcl asks for.
plugin "raw_exec" {
  config {
    enabled = true
  }
}
HCL
	# What README.md tells a Nomad administrator to add for zfs-csi.
	cp "$NOMAD/specs/client.hcl" /etc/nomad.d/zfs-csi.hcl || return 1
	systemd-run --unit nomad --property Restart=always --property KillMode=process \
		/usr/local/bin/nomad agent -config /etc/nomad.d || return 1
	STEP_NOTE="nomad $(nomad version | head -1)"
}

peer_interface() { ls /sys/class/net | grep -v '^lo$' | head -1; }

# a: both clients ready.
step_cluster() {
	wait_for 300 "two ready Nomad clients" nodes_ready || { nomad node status; journalctl -u nomad --no-pager | tail -30; return 1; }
	STEP_NOTE="$(nomad node status | tail -n +2 | awk '{print $4 " " $NF}' | tr '\n' ' ')"
}

nodes_ready() { [[ $(nomad node status 2>/dev/null | awk '$NF == "ready"' | wc -l) -eq 2 ]]; }

step_scenarios() {
	local args=(-test.v -test.timeout 80m)
	[[ -s $NOMAD/go-test-run ]] && args+=(-test.run "$(cat "$NOMAD/go-test-run")")
	(cd "$WORK" && ZFS_CSI_E2E_NOMAD_SPECS="$NOMAD/specs" ZFS_CSI_E2E_NODE="$NODE" ZFS_CSI_E2E_PEER=node-b \
		ZFS_CSI_E2E_PEER_ZFS="$SHARE/results/b/zfs-list.txt" ZFS_CSI_E2E_POOL="$POOL" \
		"$NOMAD/nomad.test" "${args[@]}") 2>&1 | tee "$RESULTS/scenarios.log"
	local rc=${PIPESTATUS[0]}
	go_test_summary "$RESULTS/scenarios.log"
	return "$rc"
}

# b: publish this host's datasets for a's scenarios until they are done.
step_publish() {
	local list=$RESULTS/zfs-list.txt
	while [[ ! -e $DONE ]]; do
		zfs list -H -t all -o name -r "$POOL" >"$list.tmp" 2>&1 && mv "$list.tmp" "$list"
		sleep 1
	done
	STEP_NOTE="node-a's scenarios are done"
}

collect_logs() {
	journalctl -u zfs-csi --no-pager -o short-precise >"$RESULTS/driver.log" 2>&1
	journalctl -u nomad --no-pager -o short-precise >"$RESULTS/nomad.log" 2>&1
	zfs list -t all -o name,type,used,mountpoint >"$RESULTS/zfs-list-end.txt" 2>&1
}

main() {
	mkdir -p "$RESULTS" "$WORK"
	local failed=0 s
	for s in network driver agent; do
		step "$NODE-$s" "step_$s" || { failed=$((failed + 1)); break; }
	done
	if [[ $ROLE == a ]]; then
		if [[ $failed -eq 0 ]]; then
			step cluster step_cluster || failed=$((failed + 1))
		fi
		if [[ $failed -eq 0 ]]; then
			step scenarios step_scenarios || failed=$((failed + 1))
		fi
		touch "$DONE"
	else
		[[ $failed -eq 0 ]] && step_publish
	fi
	collect_logs
	say "e2e-nomad guest $ROLE finished with $failed failed steps after $SECONDS s"
	echo "$failed" >"$RESULTS/exit-code"
	sync
	systemctl --no-block poweroff
}

main
