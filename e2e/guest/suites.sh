# shellcheck shell=bash
# The e2e suites, run inside the guest by init.sh in this order:
#   1. smoke: ZFS works and udev creates /dev/zvol links (kept permanently first:
#      every later suite depends on it, and it tells a broken image from a broken driver);
#   2. the driver as a real process, then csi-sanity against it;
#   3. the e2e Go test binary, which starts its own driver instances.
# run_suites returns the number of failed steps.

PARENT_DATASET=$POOL/csi
SANITY_VOLUME_SIZE=$((64 << 20))         # small: thick zvols reserve their full size
SANITY_VOLUME_EXPAND_SIZE=$((128 << 20))
SANITY_FILES=$GUEST_DIR/sanity # YAML parameter files for csi-sanity
# Spec-name regexps that csi-sanity skips, each with the reason. Every skip of
# the harness lives here, so the list shrinks visibly as the driver grows.
SANITY_SKIP=(
	# csi-sanity v5.6.0 compares the snapshot's topology with the node's by
	# reflect.DeepEqual, and the node's message carries a protobuf sizeCache
	# set when the request marshalled it: no answer can pass. The controller
	# unit tests check the same with proto.Equal
	# (TestSnapshotsAreUsableOnTheirNodeOnly); wiring/sanity_test.go skips it too.
	'should succeed when creating a snapshot with accessibility requirements'
)

suite_smoke() {
	zfs version || return 1
	STEP_NOTE="$(zfs version | sed -n 1p)"
	zpool status "$POOL" || return 1
	zfs create -V 64M "$POOL/smoke" || return 1
	udevadm settle --timeout=30
	if ! wait_for 10 "/dev/zvol/$POOL/smoke" test -e "/dev/zvol/$POOL/smoke"; then
		fail "zvol link /dev/zvol/$POOL/smoke missing after udevadm settle"
		find /dev/zvol -ls 2>&1 | sed -n 1,20p
		return 1
	fi
	say "zvol link present: /dev/zvol/$POOL/smoke -> $(readlink -f "/dev/zvol/$POOL/smoke")"
	STEP_NOTE="$STEP_NOTE, zvol link ok"
	zfs destroy "$POOL/smoke"
}

# sanity_run NAME [csi-sanity flags...] runs csi-sanity once against the running
# driver. Adding a configuration (block on zvols, ext4/xfs on zvols via
# --csi.testvolumeparameters) is one more call in run_suites.
sanity_run() {
	local name="$1"
	shift
	local skip log="$RESULTS/sanity-$name.log"
	skip="$(IFS='|'; echo "${SANITY_SKIP[*]}")"
	"$SHARE/csi-sanity" \
		--csi.endpoint="$DRIVER_SOCKET" \
		--csi.testvolumesize="$SANITY_VOLUME_SIZE" \
		--csi.testvolumeexpandsize="$SANITY_VOLUME_EXPAND_SIZE" \
		--csi.testvolumemutableparameters="$SANITY_FILES/mutable-parameters.yaml" \
		--csi.mountdir="/tmp/csi-$name-mount" --csi.stagingdir="/tmp/csi-$name-staging" \
		--ginkgo.skip="$skip" \
		--ginkgo.junit-report="$RESULTS/sanity-$name.xml" \
		--ginkgo.no-color --ginkgo.timeout=30m \
		"$@" 2>&1 | tee "$log"
	local rc=${PIPESTATUS[0]}
	# Ginkgo's closing lines: "Ran X of Y Specs in …" and "… N Passed | N Failed | …".
	STEP_NOTE="$(grep -E '^Ran [0-9]+ of [0-9]+ Specs' "$log" | tail -1 | sed 's/ in .*//'): $(grep -oE '[0-9]+ Passed \| [0-9]+ Failed \| [0-9]+ Pending \| [0-9]+ Skipped' "$log" | tail -1)"
	return "$rc"
}

# e2e_tests runs the Go e2e test binary; the tests start their own drivers on
# their own sockets and parent datasets under the pool.
e2e_tests() {
	local log="$RESULTS/e2e-test.log" timeout
	timeout="$(go_test_timeout)" || return 1
	(cd /tmp && ZFS_CSI_BINARY="$SHARE/zfs-csi" ZFS_CSI_E2E_POOL="$POOL" \
		"$SHARE/e2e.test" -test.v -test.timeout="$timeout" -test.run="$(cat "$SHARE/go-test-run" 2>/dev/null)") 2>&1 | tee "$log"
	local rc=${PIPESTATUS[0]}
	STEP_NOTE="$(grep -c -- '^--- PASS' "$log") passed, $(grep -c -- '^--- FAIL' "$log") failed, $(grep -c -- '^--- SKIP' "$log") skipped (top level)"
	# The failed tests' names, so that the last lines of a run say which.
	local failed
	failed="$(sed -n 's/^--- FAIL: \([^ ]*\).*/\1/p' "$log" | paste -sd' ' -)"
	[[ -n $failed ]] && STEP_NOTE+="; failed: $failed"
	return "$rc"
}

run_suites() {
	local failed=0
	step smoke suite_smoke || failed=$((failed + 1))

	if [[ ! -x $SHARE/zfs-csi ]]; then
		say "NO DRIVER BINARY in the share: only the smoke suite ran"
		echo "SKIP driver suites (no driver binary)" >>"$RESULTS/summary.txt"
		return "$failed"
	fi
	if step driver-start start_driver "$PARENT_DATASET"; then
		# --- sanity-run list (node service owner edits here) ---
		# Mount access on datasets (csi-sanity's mount capabilities have no
		# fsType), then block access on zvols. Mount access on ext4 and xfs
		# zvols runs in the e2e Go tests (TestNodeSanityOnFormattedZvols):
		# csi-sanity v5.6.0 has no flag for a fsType, so it goes through a
		# proxy that sets one.
		if [[ $(cat "$SHARE/sanity" 2>/dev/null) != 0 ]]; then
			step sanity-mount-dataset sanity_run mount-dataset || failed=$((failed + 1))
			step sanity-block-zvol sanity_run block-zvol --csi.testvolumeaccesstype=block || failed=$((failed + 1))
		else
			echo "SKIP csi-sanity (E2E_SANITY=0)" >>"$RESULTS/summary.txt"
		fi
		# --- end of sanity-run list ---
	else
		failed=$((failed + 1))
	fi
	stop_driver

	if [[ -x $SHARE/e2e.test ]]; then
		step e2e-go-tests e2e_tests || failed=$((failed + 1))
	else
		echo "SKIP e2e Go tests (no e2e.test binary: package e2e/tests missing)" >>"$RESULTS/summary.txt"
	fi
	return "$failed"
}
