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
# ACLs enabled, and docs/nomad.md's setup commands (its ```sh blocks) run as they
# are written: a's after bootstrapping ACLs, on both clients the bridge's
# token (which a creates and hands b through the share), client.hcl and
# zfs-csi-nomad.service. Results of b go to results/b.
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
IP=$SERVER_IP
[[ $ROLE == b ]] && IP=192.168.77.2
# The daemons' peer channel: each serves the other at port 7443.
PEER_PORT=7443
POOL=tank
WORK=/tmp/e2e-nomad
DONE=$SHARE/results/scenarios-done
# What a hands b: the bridge's token, as docs/nomad.md step 2 makes it. Test-only:
# a real cluster copies it to each client by its own means.
HANDOFF=$SHARE/results/handoff
MANAGEMENT_TOKEN_FILE=/root/nomad-management.token

# shellcheck source=../lib.sh
source "$GUEST_DIR/lib.sh"

step_network() {
	local ip=$IP
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
	# As README.md says: the parent dataset; the node ID is the host name.
	install_driver /dev/vdb "$WORK" || return 1
	peer_channel "$NOMAD/peer" "$IP:$PEER_PORT" "node-a=192.168.77.1:$PEER_PORT,node-b=192.168.77.2:$PEER_PORT" || return 1
	restart_driver
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
  # Only for the scenarios' workloads, which stand in for containers that
  # write as root into their volumes. zfs-csi needs no root for exec: its
  # plugin job runs as nobody (the Plugin scenario checks it).
  options {
    "user.denylist" = "Administrator"
  }
  # What the exec tasks' chroots hold: the plugin job's sleep, the
  # scenarios' sh and coreutils, and their libraries. Nomad 1.6 builds each
  # exec allocation's chroot by linking every file of chroot_env into it;
  # its default (all of /usr, /etc, /bin, /lib, …) is some 40,000 files in
  # this image (kernel headers and modules for DKMS among them), which under
  # TCG took 4 min 45 s per allocation. The real-host default is not at stake:
  # this only keeps each job's start short.
  chroot_env {
    "/bin"                      = "/bin"
    "/etc"                      = "/etc"
    "/lib64"                    = "/lib64"
    "/lib/x86_64-linux-gnu"     = "/lib/x86_64-linux-gnu"
    "/usr/bin"                  = "/usr/bin"
    "/usr/lib/x86_64-linux-gnu" = "/usr/lib/x86_64-linux-gnu"
  }
}
acl {
  enabled = true
}
HCL
	systemd-run --unit nomad --property Restart=always --property KillMode=process \
		/usr/local/bin/nomad agent -config /etc/nomad.d || return 1
	STEP_NOTE="nomad $(nomad version | sed -n 1p)"
}

peer_interface() {
	local dev
	for dev in /sys/class/net/*; do
		if [[ ${dev##*/} != lo ]]; then
			echo "${dev##*/}"
			return
		fi
	done
}

# readme_block N prints the Nth ```sh block of docs/nomad.md's "Setting it up",
# one command a line.
readme_block() {
	awk -v want="$1" '
		/^## / { in_section = ($0 == "## Setting it up") }
		in_section && /^ *```sh$/ { n++; in_block = (n == want); next }
		in_block && /^ *```$/ { in_block = 0; next }
		in_block { sub(/^ +/, ""); if ($0 != "") print }
	' "$NOMAD/nomad.md"
}

# run_readme N DIR runs docs/nomad.md's Nth setup block in DIR, each command as
# written. `nomad plugin status` is asked again until it answers: Nomad
# registers the plugin once an allocation's probe succeeds.
run_readme() {
	local n="$1" dir="$2" line commands
	commands="$(readme_block "$n")"
	[[ -n $commands ]] || { fail "docs/nomad.md's setup has no sh block $n"; return 1; }
	while IFS= read -r line; do
		say "docs/nomad.md block $n: $line"
		if [[ $line == "nomad plugin status "* ]]; then
			local deadline=$((SECONDS + 300))
			until (cd "$dir" && bash -c "$line" >/dev/null 2>&1); do
				((SECONDS < deadline)) || { fail "'$line' failed for 300 s"; break; }
				sleep 5
			done
		fi
		(cd "$dir" && bash -euo pipefail -c "$line") || { fail "docs/nomad.md block $n: '$line' failed"; return 1; }
	done <<<"$commands"
}

# a: ACLs bootstrapped, then docs/nomad.md step 2 (once per cluster) with the
# management token; the bridge's token handed to b.
step_acl() {
	local token
	wait_for 120 "the ACL bootstrap" acl_bootstrap || { journalctl -u nomad --no-pager | tail -30; return 1; }
	token="$(cat "$MANAGEMENT_TOKEN_FILE")"
	mkdir -p "$WORK/cluster"
	cp "$NOMAD"/specs/*.hcl "$WORK/cluster/"
	NOMAD_TOKEN="$token" run_readme 1 "$WORK/cluster" || return 1
	[[ -s $WORK/cluster/zfs-csi-bridge.token ]] || { fail "docs/nomad.md step 2 made no zfs-csi-bridge.token"; return 1; }
	mkdir -p "$HANDOFF"
	cp "$WORK/cluster/zfs-csi-bridge.token" "$HANDOFF/zfs-csi-bridge.token.tmp" &&
		mv "$HANDOFF/zfs-csi-bridge.token.tmp" "$HANDOFF/zfs-csi-bridge.token" || return 1
	STEP_NOTE="$(NOMAD_TOKEN="$token" nomad acl policy list | tail -n +2 | awk '{print $1}' | tr '\n' ' ')"
}

acl_bootstrap() {
	nomad acl bootstrap -t '{{ .SecretID }}' >"$MANAGEMENT_TOKEN_FILE.tmp" 2>/dev/null &&
		mv "$MANAGEMENT_TOKEN_FILE.tmp" "$MANAGEMENT_TOKEN_FILE"
}

# both: docs/nomad.md step 3, with the token a made and the shipped client.hcl.
step_client() {
	wait_for 900 "the bridge's token from node-a" test -s "$HANDOFF/zfs-csi-bridge.token" || return 1
	local dir=$WORK/client
	mkdir -p "$dir"
	cp "$HANDOFF/zfs-csi-bridge.token" "$NOMAD/specs/client.hcl" "$dir/" || return 1
	run_readme 2 "$dir" || return 1
	wait_for 60 "zfs-csi-nomad active" systemctl is-active --quiet zfs-csi-nomad || { systemctl status zfs-csi-nomad --no-pager; return 1; }
	STEP_NOTE="token $(stat -c '%a %U' /etc/zfs-csi/nomad-token), zfs-csi-nomad $(systemctl is-active zfs-csi-nomad)"
}

# a: docs/nomad.md step 4 with a token of the zfs-csi-deployer policy, as an
# operator who runs the plugin job has (not the management token).
step_plugin_job() {
	local deployer
	deployer="$(NOMAD_TOKEN="$(cat "$MANAGEMENT_TOKEN_FILE")" nomad acl token create -name e2e-deployer \
		-policy zfs-csi-deployer -t '{{ .SecretID }}')" || return 1
	NOMAD_TOKEN="$deployer" run_readme 3 "$WORK/cluster" || return 1
	STEP_NOTE="run with a zfs-csi-deployer token"
}

# a: both clients ready, each with client.hcl's mark.
step_cluster() {
	wait_for 300 "two ready Nomad clients with the zfs_csi mark" nodes_ready ||
		{ nomad node status; journalctl -u nomad --no-pager | tail -30; return 1; }
	STEP_NOTE="$(nomad node status | tail -n +2 | awk '{print $4 " " $NF}' | tr '\n' ' ')"
}

nodes_ready() {
	[[ $(nomad node status -filter 'Meta.zfs_csi == "true"' 2>/dev/null | awk '$NF == "ready"' | wc -l) -eq 2 ]]
}

step_scenarios() {
	local timeout
	timeout="$(go_test_timeout)" || return 1
	local args=(-test.v -test.timeout "$timeout")
	[[ -s $NOMAD/go-test-run ]] && args+=(-test.run "$(cat "$NOMAD/go-test-run")")
	(cd "$WORK" && NOMAD_TOKEN="$(cat "$MANAGEMENT_TOKEN_FILE")" ZFS_CSI_E2E_NOMAD_SPECS="$NOMAD/specs" ZFS_CSI_E2E_NODE="$NODE" ZFS_CSI_E2E_PEER=node-b \
		ZFS_CSI_E2E_PEER_ADDRESS=192.168.77.2 ZFS_CSI_E2E_PEER_CERTS="$PEER_DIR" ZFS_CSI_E2E_PEER_ZFS="$SHARE/results/b/zfs-list.txt" ZFS_CSI_E2E_POOL="$POOL" ZFS_CSI_E2E_PEER_RESULTS="$SHARE/results/b" \
		"$NOMAD/nomad.test" "${args[@]}") 2>&1 | tee "$RESULTS/scenarios.log"
	local rc=${PIPESTATUS[0]}
	go_test_summary "$RESULTS/scenarios.log"
	return "$rc"
}

# b: publish this host's datasets for a's scenarios until they are done,
# with the properties they check and what its daemon logged: refusals of
# another node's calls, calls node-a forwarded over the peer channel, and
# its pulls' figures. Beside it, the bare side of the throughput scenario
# (TestBareReceiver: a TCP port into zfs receive).
step_publish() {
	local list=$RESULTS/zfs-list.txt props=$RESULTS/zfs-props.txt counts=$RESULTS/driver-counts.txt pulls=$RESULTS/pulls.txt n=0
	ZFS_CSI_E2E_BARE_LISTEN="$IP:7444" ZFS_CSI_E2E_BARE_DATASET="$POOL/bare" ZFS_CSI_E2E_DONE="$DONE" \
		ZFS_CSI_E2E_NODE="$NODE" ZFS_CSI_E2E_PEER_CERTS="$PEER_DIR" \
		"$NOMAD/nomad.test" -test.run '^TestBareReceiver$' -test.v >"$RESULTS/bare-receiver.log" 2>&1 &
	mkdir -p "$RESULTS/commands"
	while [[ ! -e $DONE ]]; do
		serve_commands "$RESULTS/commands"
		zfs list -H -t all -o name -r "$POOL" >"$list.tmp" 2>&1 && mv "$list.tmp" "$list"
		zfs get -Hp -o name,property,value refquota,compression,encryption,used -r "$POOL" >"$props.tmp" 2>&1 && mv "$props.tmp" "$props"
		# The journal is read every third second: under emulation it is slow.
		# One read serves the counts and the pull lines.
		if ((n++ % 3 == 0)); then
			journalctl -u zfs-csi -o cat --no-pager 2>/dev/null | awk -v pulls="$pulls.tmp" '
				BEGIN { printf "" > pulls }
				/CSI client error \(retryable\)/ { refusals++ }
				/"caller":"node-a"/ && /csi\.v1\./ { forwarded++ }
				/"message":"(pulling|pull stream ended)"/ { print > pulls }
				END { printf "refusals %d\nforwarded-from-node-a %d\n", refusals, forwarded; close(pulls) }' >"$counts.tmp" &&
				mv "$counts.tmp" "$counts" && mv "$pulls.tmp" "$pulls"
		fi
		sleep 1
	done
	STEP_NOTE="node-a's scenarios are done"
}

# serve_commands DIR runs each script node-a's scenarios put in DIR (N.sh)
# as root here, as this host's operator would at its console: a move is
# run on the node the volume moves to. Each runs once, in the background;
# its stdout goes to N.out, its stderr to N.err, and its exit status to
# N.rc, written last. Test-only: the share is the harness's own.
serve_commands() {
	local script base
	for script in "$1"/*.sh; do
		[[ -e $script ]] || continue
		base="${script%.sh}"
		mv "$script" "$base.run" || continue
		{
			bash "$base.run" >"$base.out" 2>"$base.err"
			echo "$?" >"$base.rc.tmp" && mv "$base.rc.tmp" "$base.rc"
		} &
	done
}

collect_logs() {
	journalctl -u zfs-csi --no-pager -o short-precise >"$RESULTS/driver.log" 2>&1
	journalctl -u nomad --no-pager -o short-precise >"$RESULTS/nomad.log" 2>&1
	journalctl -u zfs-csi-nomad --no-pager -o short-precise >"$RESULTS/bridge.log" 2>&1
	zfs list -t all -o name,type,used,mountpoint >"$RESULTS/zfs-list-end.txt" 2>&1
}

main() {
	mkdir -p "$RESULTS" "$WORK"
	watch_deadline &
	local failed=0 s
	local steps=(network driver agent client)
	[[ $ROLE == a ]] && steps=(network driver agent acl client)
	for s in "${steps[@]}"; do
		step "$NODE-$s" "step_$s" || { failed=$((failed + 1)); break; }
	done
	if [[ $ROLE == a ]]; then
		# The scenarios' nomad commands, and the steps below, act as the
		# cluster's administrator.
		[[ -s $MANAGEMENT_TOKEN_FILE ]] && NOMAD_TOKEN="$(cat "$MANAGEMENT_TOKEN_FILE")" && export NOMAD_TOKEN
		for s in cluster plugin_job scenarios; do
			[[ $failed -eq 0 ]] || break
			step "${s//_/-}" "step_$s" || failed=$((failed + 1))
		done
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
