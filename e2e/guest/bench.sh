# shellcheck shell=bash
# The benchmark (make bench), run inside the guest by init.sh: the bench
# program from the share (e2e/bench) measures the driver binary against the
# bare zfs and mount commands on pool tank and writes its table to
# results/bench.txt, which the host prints. Arguments for the program come
# from share/bench-args (BENCH_ARGS on the host, e.g. "-quick").
# run_bench returns the number of failed steps.

bench_program() {
	local log="$RESULTS/bench.log" args=() bin=/tmp/zfs-csi-bench-bin
	read -r -a args <"$SHARE/bench-args" || true
	# From tmpfs, as from a host's disk: executed from the 9p share, every
	# page the daemon touches would come through 9p, and each start with it.
	mkdir -p "$bin" && cp "$SHARE/zfs-csi" "$SHARE/bench" "$bin/" || return 1
	(cd /tmp && "$bin/bench" -binary "$bin/zfs-csi" -pool "$POOL" -out "$RESULTS/bench.txt" \
		-work /tmp/zfs-csi-bench "${args[@]}") 2>&1 | tee "$log"
	local rc=${PIPESTATUS[0]}
	# The daemons' logs, for a failed run.
	for dir in /tmp/zfs-csi-bench/*/; do
		[[ -f $dir/driver.log ]] && cp "$dir/driver.log" "$RESULTS/driver-$(basename "$dir").log"
	done
	# Read by step (lib.sh), which runs this function.
	# shellcheck disable=SC2034
	STEP_NOTE="$(grep -c 'MISSED' "$RESULTS/bench.txt" 2>/dev/null || echo '?') targets missed"
	return "$rc"
}

run_bench() {
	local failed=0
	step bench bench_program || failed=$((failed + 1))
	return "$failed"
}
