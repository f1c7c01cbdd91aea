#!/bin/bash
# suite.sh — the package on a systemd-booted host, run by zfs-csi-e2e.service
# (see boot.sh) once the guest is up. It walks the path of a new user: install
# the .deb with apt, configure /etc/default/zfs-csi, start the service, then
# checks readiness, csi-sanity on the socket the package configured, a restart
# under published volumes, Kubernetes mode, and that removing and purging the
# package removes the unit and leaves every dataset alone. It writes
# share/results/exit-code (the number of failed steps) and powers off.
set -uo pipefail

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive
SHARE=/share
RESULTS=$SHARE/results
GUEST_DIR=$SHARE/guest
POOL=tank
POOL_DISK=/dev/vdb
UNIT=zfs-csi.service
DEFAULTS=/etc/default/zfs-csi
WORK=/tmp/e2e-systemd

# lib.sh: say, fail, step, wait_for, DRIVER_SOCKET (/run/zfs-csi/csi.sock, the
# package's default); suites.sh: sanity_run and its skip list, shared with the
# init-booted run.
# shellcheck source=../lib.sh
source "$GUEST_DIR/lib.sh"
# shellcheck source=../suites.sh
source "$GUEST_DIR/suites.sh"
# shellcheck source=readme.sh
source "$GUEST_DIR/systemd/readme.sh"
DRIVER_LOG=$RESULTS/driver.log # the daemon's journal, printed by the host on failure

# --- helpers -----------------------------------------------------------------

# check DESCRIPTION CMD... runs one assertion and says how it went.
check() {
	local what="$1"
	shift
	if "$@"; then
		echo "    ok: $what"
	else
		fail "$what"
		return 1
	fi
}

prop() { systemctl show -p "$1" --value "$UNIT"; }

# show_unit prints the unit's state the way an operator would look at it.
show_unit() {
	echo "--- systemctl show -p ActiveState,SubState,Result,ExecMainStatus,NRestarts,StatusText $UNIT"
	systemctl show -p ActiveState,SubState,Result,ExecMainStatus,NRestarts,StatusText "$UNIT"
}

# is_state ACTIVE [SUB] compares the unit's ActiveState (and SubState).
is_state() {
	[[ $(prop ActiveState) == "$1" ]] && [[ -z ${2:-} || $(prop SubState) == "$2" ]]
}

ctl() { /usr/sbin/zfs-csi ctl "$@"; }

# count WORD FILE counts the occurrences of WORD in FILE.
count() { grep -o "$1" "$2" | wc -l; }

datasets() { zfs list -t all -H -p -o name,guid,type,createtxg -s name; }

# mounts_under DIR lists the mounts below DIR.
mounts_under() { findmnt -l -n -o TARGET,SOURCE,FSTYPE | grep -F "$1/"; }

dump_journal() { journalctl -u "$UNIT" --no-pager -o short-precise >"$DRIVER_LOG" 2>&1; }

# --- steps -------------------------------------------------------------------

step_boot() {
	check "PID 1 is systemd" test "$(basename "$(readlink /proc/1/exe)")" = systemd || return 1
	say "systemd $(systemctl --version | sed -n 1p | cut -d' ' -f2), system state: $(systemctl is-system-running)"
	systemctl --failed --no-legend --plain | sed 's/^/    failed unit: /'
	check "the zfs module is loaded (zfs-load-module.service)" test -e /dev/zfs || return 1
	zpool create -f "$POOL" "$POOL_DISK" || return 1
	STEP_NOTE="$(zfs version | sed -n 1p), pool $POOL on $POOL_DISK"
}

step_start() {
	zfs list "$POOL/csi" >/dev/null 2>&1 || zfs create "$POOL/csi" || return 1 # README's first steps made it
	set_option ZFS_CSI_PARENT_DATASETS "$POOL/csi"
	set_option ZFS_CSI_ALLOW_PATHS /tmp # the suite's staging and target paths, and csi-sanity's
	set_option ZFS_CSI_LOG_LEVEL debug
	local start=$SECONDS
	say "systemctl restart $UNIT"
	check "systemctl restart returns once the daemon is ready" systemctl restart "$UNIT" || { show_unit; return 1; }
	show_unit
	check "active (running)" is_state active running || return 1
	check "the status line names the socket" grep -q "serving unix:///run/zfs-csi/csi.sock" <(prop StatusText) || return 1
	check "the socket exists" test -S "$DRIVER_SOCKET" || return 1
	check "Probe says ready" grep -q '"ready": *true' <(ctl probe) || return 1
	# A core dump of the daemon would put loaded keys on disk.
	check "the daemon may not dump core (LimitCORE=0)" grep -Eq '^Max core file size +0 +0 ' "/proc/$(prop MainPID)/limits" || return 1
	systemctl status "$UNIT" --no-pager -n 5 | sed 's/^/    /'
	STEP_NOTE="active (running) and READY in $((SECONDS - start)) s, $(prop StatusText)"
}

# READY=1 only once the parent datasets are usable: with a parent that does
# not exist yet (a pool imported late) the unit keeps restarting, never
# becomes active and serves no socket, until the dataset appears.
step_ready_waits_for_parents() {
	set_option ZFS_CSI_PARENT_DATASETS "$POOL/late"
	systemctl restart --no-block "$UNIT"
	wait_for 30 "a failed start waiting to be retried" is_state activating auto-restart || { show_unit; return 1; }
	show_unit
	check "no socket while the parent is missing" test ! -S "$DRIVER_SOCKET" || return 1
	journalctl -u "$UNIT" --no-pager -o cat | grep '^zfs-csi: ' | tail -1 | sed 's/^/    journal: /'
	zfs create "$POOL/late" || return 1
	check "active within 15 s of the dataset appearing" wait_for 15 "the unit to become active" is_state active running || { show_unit; return 1; }
	show_unit
	STEP_NOTE="restarting (NRestarts=$(prop NRestarts)) until $POOL/late existed, then active"
}

# A configuration error exits 78 and systemd does not restart the daemon.
step_config_error_stops() {
	set_option ZFS_CSI_LOG_LEVEL loud
	systemctl restart "$UNIT" 2>&1 | sed 's/^/    /'
	sleep 7 # longer than RestartSec
	show_unit
	check "failed with status 78 (EX_CONFIG)" [ "$(prop ExecMainStatus)" = 78 ] || return 1
	check "not restarted" is_state failed || return 1
	journalctl -u "$UNIT" --no-pager -o cat | grep '^zfs-csi: ' | tail -1 | sed 's/^/    journal: /'
	set_option ZFS_CSI_LOG_LEVEL debug
	set_option ZFS_CSI_PARENT_DATASETS "$POOL/csi"
	check "restarts once fixed" systemctl restart "$UNIT" || return 1
	STEP_NOTE="ExecMainStatus=78, no restart; fixed and active again"
}

# bad_setting_stops UNIT VARIABLE VALUE [SAYS]: with VARIABLE=VALUE in the
# configuration file, UNIT fails before it starts anything, with one line
# that names the variable and its line in the file (and SAYS, when given),
# and systemd does not restart it (RestartPreventExitStatus=78): no loop.
bad_setting_stops() {
	local unit="$1" variable="$2" value="$3" says="${4:-}" rc=0
	local named="variable $variable \"$value\" ($DEFAULTS:"
	if [[ -n $says ]]; then
		named="variable $variable ($DEFAULTS:"
	fi
	set_option "$variable" "$value"
	systemctl reset-failed "$unit" 2>/dev/null
	systemctl restart "$unit" 2>&1 | sed 's/^/    /'
	sleep 7 # longer than RestartSec=5s
	# What an operator sees first: systemctl status with its own journal
	# lines (the last 10), where the daemon's one line comes before
	# systemd's three about the exit.
	systemctl status "$unit" --no-pager -l | sed 's/^/    /'
	check "$unit: failed" [ "$(systemctl show -p ActiveState --value "$unit")" = failed ] &&
		check "$unit: exit status 78" [ "$(systemctl show -p ExecMainStatus --value "$unit")" = 78 ] &&
		check "$unit: NRestarts=0" [ "$(systemctl show -p NRestarts --value "$unit")" = 0 ] &&
		check "$unit: the status shows the line naming $variable at $DEFAULTS" \
			grep -qF "$named" <(systemctl status "$unit" --no-pager -l) &&
		check "$unit: the line says \"$says\"" grep -qF "$says" <(systemctl status "$unit" --no-pager -l) || rc=1
	# The setting goes back either way: the steps after this one need the
	# daemon serving.
	set_option "$variable" -
	return "$rc"
}

step_bad_setting_no_restart_loop() {
	bad_setting_stops "$UNIT" ZFS_CSI_REAP_INTERVAL 0s || return 1
	bad_setting_stops zfs-csi-nomad.service ZFS_CSI_NOMAD_JOB "" || return 1
	# A misspelt name is no setting either unit reads: both refuse it.
	bad_setting_stops "$UNIT" ZFS_CSI_METRICS_ADRESS 127.0.0.1:9820 "did you mean ZFS_CSI_METRICS_ADDRESS?" || return 1
	bad_setting_stops zfs-csi-nomad.service ZFS_CSI_METRICS_ADRESS 127.0.0.1:9820 "did you mean ZFS_CSI_METRICS_ADDRESS?" || return 1
	systemctl reset-failed zfs-csi-nomad.service
	check "the daemon restarts once fixed" systemctl restart "$UNIT" || return 1
	STEP_NOTE="both units failed with 78, NRestarts=0, the status naming the variable and its line, for a bad value and a misspelt name"
}

step_sanity() {
	check "the daemon serves the package's socket" is_state active running || return 1
	sanity_run package-socket
}

# stage_and_publish NAME [create flags] creates a volume, stages and publishes
# it under $WORK/NAME and writes a file into it; prints the volume ID.
stage_and_publish() {
	local name="$1" volume
	shift
	volume="$(ctl -o id create-volume "$name" --size 64M "$@")"
	[[ -n $volume ]] || return 1
	mkdir -p "$WORK/$name/staging" # the CO makes the staging directory, the plugin the target
	ctl stage "$volume" "$WORK/$name/staging" >/dev/null &&
		ctl publish "$volume" "$WORK/$name/target" --staging-path "$WORK/$name/staging" >/dev/null &&
		echo "written before the restart" >"$WORK/$name/target/before" || return 1
	echo "$volume"
}

step_restart_keeps_publishes() {
	local dataset zvol pid_before
	dataset="$(stage_and_publish restart-dataset)" || { fail "dataset volume: create, stage or publish failed"; return 1; }
	zvol="$(stage_and_publish restart-ext4 --fs-type ext4)" || { fail "ext4 volume: create, stage or publish failed"; return 1; }
	mounts_under "$WORK" | sed 's/^/    before: /'
	pid_before="$(prop MainPID)"
	# The socket directory outlives the restart (RuntimeDirectoryPreserve): a
	# Nomad bridge under exec holds it bind-mounted.
	local rundir_before
	rundir_before="$(stat -c %i /run/zfs-csi)"
	say "systemctl restart $UNIT with two volumes published"
	check "systemctl restart" systemctl restart "$UNIT" || return 1
	check "a new daemon process" [ "$(prop MainPID)" != "$pid_before" ] || return 1
	check "the same /run/zfs-csi after the restart" [ "$(stat -c %i /run/zfs-csi)" = "$rundir_before" ] || return 1
	mounts_under "$WORK" | sed 's/^/    after:  /'
	local name volume
	for name in restart-dataset restart-ext4; do
		volume=$dataset
		[[ $name == restart-ext4 ]] && volume=$zvol
		check "$name: still mounted at its target" findmnt -n "$WORK/$name/target" || return 1
		check "$name: the file written before is there" grep -q "before the restart" "$WORK/$name/target/before" || return 1
		check "$name: writable after the restart" bash -c "echo after >'$WORK/$name/target/after'" || return 1
		check "$name: publish again is idempotent" ctl publish "$volume" "$WORK/$name/target" --staging-path "$WORK/$name/staging" || return 1
		check "$name: volume stats" ctl volume-stats "$volume" "$WORK/$name/target" || return 1
		check "$name: unpublish" ctl unpublish "$volume" "$WORK/$name/target" || return 1
		check "$name: unstage" ctl unstage "$volume" "$WORK/$name/staging" || return 1
		check "$name: delete" ctl delete-volume "$volume" || return 1
	done
	check "no mount left under $WORK" bash -c "! findmnt -l -n -o TARGET | grep -F '$WORK/restart-' >/dev/null" || return 1
	STEP_NOTE="dataset and ext4 zvol stayed mounted and writable; unpublished, unstaged and deleted by the new daemon"
}

# Kubernetes mode: the kubelet sockets, registration socket recreated when
# removed, and no controller expansion on the Kubernetes socket.
step_kubernetes_mode() {
	local plugin=/var/lib/kubelet/plugins/zfs.csi.dev/csi.sock registration=/var/lib/kubelet/plugins_registry/zfs.csi.dev-reg.sock
	set_option ZFS_CSI_KUBERNETES true
	mkdir -p /var/lib/kubelet # kubelet's directory must exist in Kubernetes mode
	check "restart in Kubernetes mode" systemctl restart "$UNIT" || return 1
	show_unit
	check "the kubelet CSI socket exists" test -S "$plugin" || return 1
	check "the registration socket exists" test -S "$registration" || return 1
	check "the Kubernetes socket serves CSI" ctl --endpoint "unix://$plugin" probe || return 1
	# EXPAND_VOLUME is a controller and a node capability, MODIFY_VOLUME a
	# controller one: the Kubernetes socket keeps only the node's.
	ctl info >"$WORK/info.json" && ctl --endpoint "unix://$plugin" info >"$WORK/kubernetes-info.json" || return 1
	check "the main socket: EXPAND_VOLUME twice, MODIFY_VOLUME once" \
		[ "$(count EXPAND_VOLUME "$WORK/info.json") $(count MODIFY_VOLUME "$WORK/info.json")" = "2 1" ] || return 1
	check "the Kubernetes socket: EXPAND_VOLUME once (node), no MODIFY_VOLUME" \
		[ "$(count EXPAND_VOLUME "$WORK/kubernetes-info.json") $(count MODIFY_VOLUME "$WORK/kubernetes-info.json")" = "1 0" ] || return 1
	rm -f "$registration"
	check "the removed registration socket is back within 10 s" wait_for 10 "$registration" test -S "$registration" || return 1
	journalctl -u "$UNIT" --no-pager -o cat | grep -E 'socket (removed|recreated)' | tail -2 | sed 's/^/    journal: /'
	set_option ZFS_CSI_KUBERNETES -
	check "back to the plain mode" systemctl restart "$UNIT" || return 1
	check "the kubelet sockets are gone" bash -c "[ ! -e '$plugin' ] && [ ! -e '$registration' ]" || return 1
	STEP_NOTE="kubelet sockets served and recreated, removed on stop"
}

# Removing and purging the package: the unit goes, the daemon stops, and no
# dataset changes, not even one that is published while the package goes.
step_remove_purge() {
	local volume snapshot
	volume="$(stage_and_publish kept)" || { fail "cannot publish a volume to keep"; return 1; }
	snapshot="$(ctl -o id create-snapshot kept-snap "$volume")"
	[[ -n $snapshot ]] || { fail "cannot snapshot the kept volume"; return 1; }
	datasets >"$WORK/zfs-before"
	sed 's/^/    zfs list (before): /' "$WORK/zfs-before"

	say "apt-get remove -y zfs-csi"
	apt-get remove -y zfs-csi 2>&1 | tee "$RESULTS/apt-remove.log" | sed 's/^/    /'
	check "dpkg: deinstall ok config-files" [ "$(dpkg-query -W -f '${Status}' zfs-csi)" = "deinstall ok config-files" ] || return 1
	check "the daemon is stopped" bash -c "! pgrep -x zfs-csi" || return 1
	check "the unit file is gone" test ! -e /lib/systemd/system/zfs-csi.service || return 1
	check "the unit is masked until the package returns" [ "$(systemctl is-enabled "$UNIT" 2>&1)" = masked ] || return 1
	check "the conffile stays after remove" test -f "$DEFAULTS" || return 1

	say "apt-get purge -y zfs-csi"
	apt-get purge -y zfs-csi 2>&1 | tee "$RESULTS/apt-purge.log" | sed 's/^/    /'
	local status
	status="$(dpkg-query -W -f '${Status}' zfs-csi 2>/dev/null)"
	check "dpkg: purged (status '${status:-none}')" bash -c "[[ -z '$status' || '$status' == *not-installed ]]" || return 1
	check "the conffile is gone" test ! -e "$DEFAULTS" || return 1
	check "no unit, mask or enablement link left" bash -c "! ls /etc/systemd/system/zfs-csi.service /etc/systemd/system/*.wants/zfs-csi.service 2>/dev/null | grep . >/dev/null" || return 1
	check "systemd knows no zfs-csi unit" bash -c "[ \"\$(systemctl show -p LoadState --value $UNIT)\" = not-found ]" || return 1

	datasets >"$WORK/zfs-after"
	check "zfs list -t all is identical after remove and purge" diff -u "$WORK/zfs-before" "$WORK/zfs-after" || return 1
	check "the published volume is still mounted" findmnt -n "$WORK/kept/target" || return 1
	check "and its data is there" grep -q "before the restart" "$WORK/kept/target/before" || return 1
	STEP_NOTE="unit removed, conffile purged; $(wc -l <"$WORK/zfs-before") datasets/snapshots unchanged ($volume, $snapshot)"
}

# step_rpm: the .rpm as an RPM distribution installs it (rpm -i; --nodeps
# because Debian's rpm database knows no "zfs" package): its files, the
# configuration in /etc/sysconfig, the service READY with a parent dataset
# named there, and rpm -e removing the package while every dataset stays.
step_rpm() {
	local rpms=("$SHARE"/zfs-csi-*.x86_64.rpm)
	local rpm=${rpms[0]}
	check "the .rpm was shared" test -f "$rpm" || return 1
	say "rpm -i --nodeps $(basename "$rpm")"
	rpm -i --nodeps "$rpm" 2>&1 | sed 's/^/    /'
	check "rpm -q zfs-csi" rpm -q zfs-csi || return 1
	check "the configuration is /etc/sysconfig/zfs-csi, a %config(noreplace) file" \
		bash -c "rpm -qc zfs-csi | grep -x /etc/sysconfig/zfs-csi >/dev/null" || return 1
	check "the license is %license" bash -c "rpm -qL zfs-csi | grep -x /usr/share/licenses/zfs-csi/LICENSE >/dev/null" || return 1
	check "the examples are %doc" bash -c "rpm -qd zfs-csi | grep examples/kubernetes/30-sidecars.yaml >/dev/null" || return 1
	zfs create -p "$POOL/rpm-csi"
	echo "ZFS_CSI_PARENT_DATASETS=$POOL/rpm-csi" >>/etc/sysconfig/zfs-csi
	systemctl daemon-reload
	check "systemctl restart returns once READY" systemctl restart "$UNIT" || { show_unit; return 1; }
	check "the unit is active (running)" is_state active running || { show_unit; return 1; }
	check "the daemon read /etc/sysconfig/zfs-csi" bash -c "journalctl -u $UNIT -b --no-pager | grep '$POOL/rpm-csi' >/dev/null" || return 1
	datasets >"$WORK/zfs-before-rpm"
	say "rpm -e zfs-csi"
	rpm -e zfs-csi 2>&1 | sed 's/^/    /'
	check "rpm -q says not installed" bash -c "! rpm -q zfs-csi" || return 1
	check "the daemon is stopped" bash -c "! pgrep -x zfs-csi" || return 1
	check "no file of the package is left but the edited configuration (.rpmsave)" \
		bash -c "! ls /usr/sbin/zfs-csi /usr/lib/systemd/system/zfs-csi.service /usr/share/doc/zfs-csi /usr/share/licenses/zfs-csi 2>/dev/null | grep . >/dev/null" || return 1
	datasets >"$WORK/zfs-after-rpm"
	check "zfs list -t all is identical after rpm -e" diff -u "$WORK/zfs-before-rpm" "$WORK/zfs-after-rpm" || return 1
	STEP_NOTE="installed, READY from /etc/sysconfig, erased with every dataset left"
}

main() {
	mkdir -p "$RESULTS" "$WORK"
	watch_deadline &
	local failed=0
	step boot step_boot || { echo 1 >"$RESULTS/exit-code"; systemctl --no-block poweroff; return; }
	step readme-install step_readme_install || failed=$((failed + 1))
	if [[ $failed -eq 0 ]]; then
		step service-start step_start || failed=$((failed + 1))
		step ready-waits-for-parents step_ready_waits_for_parents || failed=$((failed + 1))
		step config-error-no-restart step_config_error_stops || failed=$((failed + 1))
		step bad-setting-no-restart-loop step_bad_setting_no_restart_loop || failed=$((failed + 1))
		step sanity-package-socket step_sanity || failed=$((failed + 1))
		step restart-keeps-publishes step_restart_keeps_publishes || failed=$((failed + 1))
		step kubernetes-mode step_kubernetes_mode || failed=$((failed + 1))
		dump_journal
		step remove-and-purge step_remove_purge || failed=$((failed + 1))
		step rpm-install-and-erase step_rpm || failed=$((failed + 1))
	fi
	[[ -s $DRIVER_LOG ]] || dump_journal
	say "systemd-booted run finished with $failed failed steps after $SECONDS s"
	echo "$failed" >"$RESULTS/exit-code"
	sync
	systemctl --no-block poweroff
}

main
