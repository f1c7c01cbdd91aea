# shellcheck shell=bash
# Helpers shared by the guest scripts: messages, timed steps, the result summary,
# and the driver process. Sourced by init.sh; expects RESULTS and SHARE.

say() { echo "=== $*"; }
fail() { echo "!!! $*"; }

# step NAME CMD... runs one check, times it and records PASS/FAIL in the summary
# the host prints at the end. It returns the command's status.
step() {
	local name="$1" start=$SECONDS rc
	shift
	say "step $name: begin"
	"$@"
	rc=$?
	local verdict=PASS
	[[ $rc -eq 0 ]] || verdict=FAIL
	printf '%-4s %-28s %4ss  %s\n' "$verdict" "$name" "$((SECONDS - start))" "${STEP_NOTE:-}" >>"$RESULTS/summary.txt"
	STEP_NOTE=
	say "step $name: $verdict (exit $rc) in $((SECONDS - start)) s"
	return "$rc"
}

# guest_deadline prints this boot's deadline in seconds, as run.sh wrote it
# to $SHARE/guest-deadline, or fails saying it has none.
guest_deadline() {
	local deadline
	deadline="$(cat "$SHARE/guest-deadline" 2>/dev/null)"
	if [[ ! $deadline =~ ^[0-9]+$ ]]; then
		fail "no guest deadline in $SHARE/guest-deadline (run.sh writes it)" >&2
		return 1
	fi
	echo "$deadline"
}

# uptime_seconds prints the kernel's uptime in whole seconds
# (GUEST_UPTIME_FILE stands in for /proc/uptime in the host's tests). It and
# pause start no program: the loops that run all through a guest's suites
# call them, and a loaded TCG node takes a second or more to start one (a
# mv, a cut and a sleep did in a Kubernetes node's traced minute).
uptime_seconds() {
	local up _
	# A last line without its newline is still read (a test's file).
	read -r up _ <"${GUEST_UPTIME_FILE:-/proc/uptime}" || [[ -n $up ]] || return 1
	echo "${up%%.*}"
}

# pause SECONDS waits as sleep would, in bash itself: a read that times out
# on a pipe whose write end the shell holds open, so no line ever comes.
PAUSE_FD=
pause() {
	[[ -n $PAUSE_FD ]] || exec {PAUSE_FD}<> <(:)
	read -r -t "$1" -u "$PAUSE_FD" _ || true
}

# go_test_timeout prints the -test.timeout for a Go test binary started now:
# what is left of this boot's deadline (the host's E2E_TIMEOUT, which
# run.sh writes to $SHARE/guest-deadline; the host counts it from qemu's
# start, the kernel's uptime from a few seconds later) less
# GUEST_RESULTS_MARGIN seconds for the summary and logs to be written. A test
# that outruns it panics with its goroutines and the host still gets the
# results, instead of qemu being killed mid-write; a fixed figure here would
# cut a run short that the host gave more time, or let qemu be killed first.
GUEST_RESULTS_MARGIN=240
go_test_timeout() {
	local deadline up
	deadline="$(guest_deadline)" || return 1
	up="$(uptime_seconds)"
	local left=$((deadline - up - GUEST_RESULTS_MARGIN))
	((left >= 60)) || left=60
	echo "${left}s"
}

# watch_deadline runs in the background beside a guest's suites. Every
# HEARTBEAT_SECONDS it writes the kernel's uptime to $RESULTS/heartbeat. When
# the host kills a guest that outlived its deadline, that file tells it what
# kind of hang it was: its uptime says how far the guest got, and its age
# (the host's clock: the share is the host's file) says whether the guest ran
# on to the end while something in it hung, or stopped, guest and share alike.
# GUEST_WATCH_MARGIN s before the deadline, later than every Go test binary's
# own -test.timeout, it prints what each process waits in, has the kernel
# print its blocked tasks, and sends SIGQUIT to the suite's Go test binaries
# still running: a test whose own timeout never fired still shows its
# goroutines.
HEARTBEAT_SECONDS=15
GUEST_WATCH_MARGIN=120
watch_deadline() {
	local deadline up warned=""
	deadline="$(guest_deadline 2>/dev/null)"
	while true; do
		up="$(uptime_seconds)"
		# Written in place: the host reads it once the guest is gone, and a
		# kill between the truncation and the write is the one way to
		# leave it empty (a rename would start a mv every time).
		echo "$up" >"$RESULTS/heartbeat"
		if [[ -n $deadline && -z $warned ]] && ((up >= deadline - GUEST_WATCH_MARGIN)); then
			warned=1
			fail "WATCHDOG: ${up} s of a ${deadline} s deadline and the run goes on: what each process waits in, then SIGQUIT to the Go tests"
			# Every process but the kernel's threads (kthreadd, 2, and its children).
			ps --ppid 2 -p 2 --deselect -o pid,ppid,stat,etimes,wchan:32,args 2>&1 | sed 's/^/!!! ps: /'
			echo w >"${GUEST_SYSRQ_FILE:-/proc/sysrq-trigger}" 2>/dev/null
			# The guest's Go test binaries all live in the share.
			pkill -QUIT -f "^$SHARE/.*\\.test( |\$)"
		fi
		pause "${HEARTBEAT_SECONDS}"
	done
}

# wait_for DEADLINE_SECONDS DESCRIPTION CMD... polls CMD every 0.2 s until it
# succeeds or the deadline passes. Status 2 from CMD means "will never succeed".
wait_for() {
	local seconds="$1" what="$2" rc
	local deadline=$((SECONDS + seconds))
	shift 2
	while true; do
		"$@"
		rc=$?
		((rc == 0)) && return 0
		((rc == 2)) && return 1
		if ((SECONDS >= deadline)); then
			fail "timed out after $seconds s waiting for $what"
			return 1
		fi
		sleep 0.2
	done
}

DRIVER_SOCKET=/run/zfs-csi/csi.sock
DRIVER_LOG="$RESULTS/driver.log"
DRIVER_PID=

# start_driver runs the driver binary from the share as a real process with its
# log in the share (the host prints it when a run fails).
start_driver() {
	local parent="$1"
	zfs list -H -o name "$parent" >/dev/null 2>&1 || zfs create "$parent" || return 1
	mkdir -p "$(dirname "$DRIVER_SOCKET")"
	rm -f "$DRIVER_SOCKET"
	"$SHARE/zfs-csi" --endpoint "unix://$DRIVER_SOCKET" --node-id e2e-node \
		--parent-dataset "$parent" --allow-paths /tmp --log-level debug >>"$DRIVER_LOG" 2>&1 &
	DRIVER_PID=$!
	wait_for 30 "the driver socket $DRIVER_SOCKET" driver_ready || {
		fail "driver did not come up; last log lines:"
		tail -n 20 "$DRIVER_LOG"
		return 1
	}
	say "driver running (pid $DRIVER_PID) on $DRIVER_SOCKET"
}

driver_ready() {
	kill -0 "$DRIVER_PID" 2>/dev/null || {
		fail "driver exited"
		return 2
	}
	[[ -S $DRIVER_SOCKET ]]
}

stop_driver() {
	[[ -n $DRIVER_PID ]] || return 0
	kill -TERM "$DRIVER_PID" 2>/dev/null
	local deadline=$((SECONDS + 10))
	while kill -0 "$DRIVER_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
	kill -KILL "$DRIVER_PID" 2>/dev/null
	wait "$DRIVER_PID" 2>/dev/null
	DRIVER_PID=
}

# set_option NAME VALUE sets (or with VALUE "-" comments out) an option in
# the daemon's configuration file ($DEFAULTS, /etc/default/zfs-csi unless a
# suite says otherwise), as an administrator edits it.
set_option() {
	local name="$1" value="$2" file="${DEFAULTS:-/etc/default/zfs-csi}"
	if [[ $value == - ]]; then
		sed -i -E "s|^$name=|#$name=|" "$file"
	elif grep -Eq "^#?$name=" "$file"; then
		sed -i -E "s|^#?$name=.*|$name=$value|" "$file"
	else
		echo "$name=$value" >>"$file"
	fi
}

# PEER_DIR is where a node's daemon reads its peer channel's certificates.
PEER_DIR=/etc/zfs-csi/peer

# install_driver DISK WORK makes the pool on DISK with its parent dataset
# and installs the package from the share in WORK, as docs/install.md does
# on a node; the options every cluster suite sets: the parent, debug logs,
# and moves allowed (both operators allow them, docs/across-nodes.md).
install_driver() {
	local disk="$1" work="$2"
	zpool create -f "$POOL" "$disk" && zfs create "$POOL/csi" || return 1
	mkdir -p "$work"
	cp "$SHARE"/zfs-csi_*_amd64.deb "$work/" || return 1
	(cd "$work" && apt-get install -y -q ./zfs-csi_*_amd64.deb) >"$RESULTS/apt-install.log" 2>&1 ||
		{ tail -20 "$RESULTS/apt-install.log"; return 1; }
	set_option ZFS_CSI_PARENT_DATASETS "$POOL/csi"
	set_option ZFS_CSI_LOG_LEVEL debug
	set_option ZFS_CSI_ALLOW_MOVES true
}

# peer_channel CERTS LISTEN PEERS configures the daemons' peer channel
# (docs/across-nodes.md) with the certificates the host made in CERTS: this
# node's certificate and key and the CA. The daemon listens at LISTEN and
# knows the other nodes as PEERS (node=address:port,...).
peer_channel() {
	local certs="$1" listen="$2" peers="$3"
	install -d -m 0700 "$PEER_DIR" &&
		install -m 0600 "$certs/ca.pem" "$certs/$NODE.pem" "$certs/$NODE.key" "$PEER_DIR/" || return 1
	set_option ZFS_CSI_PEER_CERT "$PEER_DIR/$NODE.pem"
	set_option ZFS_CSI_PEER_KEY "$PEER_DIR/$NODE.key"
	set_option ZFS_CSI_PEER_CA "$PEER_DIR/ca.pem"
	set_option ZFS_CSI_PEER_LISTEN "$listen"
	set_option ZFS_CSI_PEERS "$peers"
}

# restart_driver starts the daemon with the options set, and notes the
# package's and ZFS's versions.
restart_driver() {
	systemctl restart zfs-csi || { systemctl status zfs-csi --no-pager; return 1; }
	STEP_NOTE="$(dpkg-query -W -f '${Version}' zfs-csi), $(zfs version | sed -n 1p)"
}

# go_test_summary LOG appends one summary line per test of a `go test -v`
# log (subtests too), with its verdict and time, for the host's table.
go_test_summary() {
	sed -n -E 's/^ *--- (PASS|FAIL|SKIP): ([^ ]+) \(([0-9.]+)s\)$/\1 \2 \3s/p' "$1" |
		while read -r verdict name secs; do
			printf '%-4s %-40s %7s\n' "$verdict" "$name" "$secs" >>"$RESULTS/summary.txt"
		done
}

# Where keep_pod_logs links every container log kubelet writes. kubelet
# removes a dead container and its log on its own schedule: in a whole run a
# csi-snapshotter that exited at 23:21:47 had its log removed at 23:22:02,
# and the restart it caused could not be explained. A hard link keeps the
# file's data after kubelet unlinks its name (same filesystem), and costs
# one ln per new log: the loop itself only globs and tests, without a fork.
POD_LOGS=${POD_LOGS:-/var/log/pods}
KEPT_POD_LOGS=${KEPT_POD_LOGS:-/var/log/kept-pods}
KEEP_SECONDS=${KEEP_SECONDS:-3}
keep_pod_logs() {
	local f kept
	while true; do
		for f in "$POD_LOGS"/*/*/*.log; do
			[[ -e $f ]] || continue
			kept="$KEPT_POD_LOGS/${f#"$POD_LOGS"/}"
			[[ -e $kept ]] && continue
			mkdir -p "${kept%/*}" && ln "$f" "$kept" 2>/dev/null
		done
		pause "$KEEP_SECONDS"
	done
}
