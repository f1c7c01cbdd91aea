# shellcheck shell=bash
# conformance.sh — make e2e-k8s-conformance: the upstream External Storage
# suite (e2e.test of k8s.io/kubernetes at K8S_VERSION, driven by the
# test-driver YAMLs of e2e/k8s/conformance) against the two-node cluster of
# make e2e-k8s. Sourced by e2e/run.sh (mode k8s with K8S_CONFORMANCE=1).
#
# conf_prepare DIR (DIR is share/k8s) builds e2e.test, ginkgo and the images
# the suite's pods use, which no registry serves here (busybox, agnhost, pause,
# under the names e2e.test asks for), and tells guest a to hand the cluster over
# instead of running the scenarios. conf_run, started in the background before
# the guests boot, waits for guest a's results/cluster-ready (the shipped
# manifests applied, the plugin Ready on both nodes), runs the suite from the
# host once per YAML, non-disruptive tests in parallel, then the [Serial] ones,
# and writes results/conformance-done. conf_summary prints ginkgo's verdict per
# YAML and phase.
#
# Environment: K8S_CONFORMANCE_DRIVERS (the YAMLs, default "dataset ext4 xfs
# block", and "group" from Kubernetes 1.35, whose e2e.test can name a group
# snapshot class), K8S_CONFORMANCE_PROCS (parallel ginkgo processes, default
# 4; group.yaml runs with one), K8S_CONFORMANCE_FOCUS (a further ginkgo
# --focus, for a quick look; the serial phase also requires [Serial] after
# it), K8S_CONFORMANCE_PHASES (default "parallel serial"; "serial" runs the
# [Serial] tests alone).

CONF_SRC="$K8S_DIR/conformance"
CONF_OUT="$E2E_OUT/conformance"
CONF_DRIVERS="${K8S_CONFORMANCE_DRIVERS:-dataset ext4 xfs block$( (($(k8s_minor) >= 35)) && echo " group")}"
CONF_PROCS="${K8S_CONFORMANCE_PROCS:-4}"
CONF_PHASES="${K8S_CONFORMANCE_PHASES:-parallel serial}"
# What guest a waits for the host's run, in seconds: the run's own deadline
# is E2E_TIMEOUT.
CONF_TIMEOUT=$((E2E_TIMEOUT - 1200))

# The images the suite's pods run are named in its sources as imageutils
# constants, which test/utils/image/manifest.go maps to registry names. Every
# image the sources of CONF_IMAGE_DIRS name (the External Storage tests and
# the framework they start pods through) has a stand-in that conf_prepare
# builds (CONF_IMAGES_BUILT), or is on CONF_IMAGES_UNUSED with the reason no
# test of a CSI driver runs it. A release that renames an image (1.37's
# glibc-dns-testing was jessie-dnsutils) stops the run before the guests
# boot: without a stand-in its pods sat in ImagePullBackOff until each
# spec's 15-minute wait failed.
CONF_IMAGE_DIRS="test/e2e/storage/testsuites test/e2e/storage/utils test/e2e/storage/framework test/e2e/storage/external test/e2e/framework/pod test/e2e/framework/volume"
CONF_IMAGES_BUILT="busybox agnhost pause nginx jessie-dnsutils glibc-dns-testing"
CONF_IMAGES_UNUSED="volume/nfs:the NFS server of framework/volume, for the in-tree NFS driver
nfs-provisioner:storage/utils' NFS provisioner, for the in-tree NFS driver"

# conf_unbuilt_images SRC (a k8s.io/kubernetes source tree) prints one line
# for each image the suite's sources name that has no stand-in and no
# reason: the image, its constant and where it is named.
conf_unbuilt_images() {
	local src="$1" manifest="$1/test/utils/image/manifest.go" dir dirs=()
	[[ -f $manifest ]] || die "$manifest: no image manifest in the suite's sources"
	for dir in $CONF_IMAGE_DIRS; do
		[[ -d $src/$dir ]] || die "$src/$dir: the suite's sources moved; update CONF_IMAGE_DIRS"
		dirs+=("$src/$dir")
	done
	grep -rnoE --include='*.go' 'imageutils\.[A-Z][A-Za-z0-9]*' "${dirs[@]}" |
		awk -v manifest="$manifest" -v src="$src/" -v built="$CONF_IMAGES_BUILT" -v unused="$CONF_IMAGES_UNUSED" '
		BEGIN {
			while ((getline line <manifest) > 0)
				if (match(line, /configs\[[A-Za-z0-9]+\] = Config\{[^,]+, "[^"]+"/)) {
					split(substr(line, RSTART, RLENGTH), f, /[][]|"/)
					image[f[2]] = f[4]
				}
			n = split(built, b, " ")
			for (i = 1; i <= n; i++) ok[b[i]] = 1
			n = split(unused, u, "\n")
			for (i = 1; i <= n; i++) { sub(/:.*/, "", u[i]); ok[u[i]] = 1 }
		}
		{
			constant = $0
			sub(/.*imageutils\./, "", constant)
			if (!(constant in image) || (image[constant] in ok)) next
			file = $0
			sub(/:[0-9]+:.*/, "", file)
			sub(src, "", file)
			if (!seen[constant]++) printf "%s (imageutils.%s, named in %s)\n", image[constant], constant, file
		}'
}

conf_prepare() {
	local dir="$1" ref name src unbuilt
	CONF_BIN="$("$K8S_DIR/build-k8s.sh" e2e)" || die "cannot build e2e.test $K8S_VERSION"
	src="$(mod_field "k8s.io/kubernetes@$K8S_VERSION")"
	[[ -d $src ]] || die "go mod download k8s.io/kubernetes@$K8S_VERSION gave no directory"
	unbuilt="$(conf_unbuilt_images "$src")" || exit 1
	[[ -z $unbuilt ]] || die "the suite of $K8S_VERSION runs images conformance.sh builds no stand-in for (add a recipe, or the reason no CSI driver's test runs it to CONF_IMAGES_UNUSED):
$unbuilt"
	local ociimage="$K8S_CACHE/bin/ociimage" busybox="$K8S_CACHE/bin/busybox" pause="$K8S_CACHE/bin/pause"
	[[ -x $ociimage && -x $busybox && -x $pause ]] || die "build-images.sh left no ociimage, busybox or pause in $K8S_CACHE/bin"
	mkdir -p "$K8S_CACHE/images"
	while read -r ref; do
		name="${ref##*/}"
		name="${name%%:*}"
		local file
		file="$K8S_CACHE/images/$(echo "$ref" | tr '/:' '__')$(conf_recipe "$name").tar"
		if [[ ! -f $file ]]; then
			log "conformance image $ref"
			case "$name" in
			# nginx: "volumes should allow exec of files on the volume" runs
			# only sh in it (first run: ImagePullBackOff without it).
			# jessie-dnsutils (glibc-dns-testing from 1.37): the multiVolume
			# tests' pods use it and run shell commands in it (first dataset
			# run: five specs stuck in ImagePullBackOff without it).
			busybox | nginx) "$ociimage" -o "$file" -name "$ref" -entrypoint /bin/sh -link-applets "$busybox" "/bin/busybox=$busybox" ;;
			# The raw block multiVolume tests write with GNU dd's
			# oflag=nocache, which busybox's dd refuses (first block run:
			# "Failed to write to /mnt/volume1"): the host's dd stands in for
			# the applet, and the host's dash for busybox's sh, which would
			# run its own dd whatever PATH holds; with the C library and
			# loader they need. The other commands are busybox's applets.
			jessie-dnsutils | glibc-dns-testing)
				local dd dash
				dd="$(command -v dd)" dash="$(command -v dash)"
				# shellcheck disable=SC2046 # one DEST=SRC per word
				"$ociimage" -o "$file" -name "$ref" -entrypoint /bin/sh -link-applets "$busybox" "/bin/busybox=$busybox" \
					"/bin/dd=$dd" "/bin/sh=$dash" $( (conf_libraries "$dd" && conf_libraries "$dash") | sort -u)
				;;
			# agnhost's subcommands run under sh -c in some tests.
			agnhost) "$ociimage" -o "$file" -name "$ref" -entrypoint /agnhost -link-applets "$busybox" \
				"/bin/busybox=$busybox" "/agnhost=$CONF_BIN/agnhost" ;;
			pause) "$ociimage" -o "$file" -name "$ref" -entrypoint /pause "/pause=$pause" ;;
			# hello-populator: "provision storage with any volume data source"
			# ([Serial]) deploys it as the Hello populator (first dataset run:
			# ImagePullBackOff without it).
			hello-populator) "$ociimage" -o "$file" -name "$ref" -entrypoint /hello-populator \
				"/hello-populator=$(conf_hello_populator)" ;;
			esac || die "cannot write image $ref"
		fi
		ln -f "$file" "$dir/images/" 2>/dev/null || cp "$file" "$dir/images/"
	done < <("$CONF_BIN/e2e.test" --list-images 2>/dev/null |
		grep -E "^registry\.k8s\.io/((e2e-test-images/)?(${CONF_IMAGES_BUILT// /|})|sig-storage/hello-populator):")
	echo "$CONF_TIMEOUT" >"$dir/conformance-timeout"
	rm -rf "$CONF_OUT"
	mkdir -p "$CONF_OUT"
}

# conf_recipe names the recipe of an image whose cached tarball an older
# recipe made, so that the cache is not taken for it.
conf_recipe() {
	case "$1" in
	jessie-dnsutils | glibc-dns-testing) echo -gnu-dd-dash ;;
	esac
}

# conf_libraries prints DEST=SRC for each shared library (and the loader) the
# program at $1 loads, as ldd resolves them on the host.
conf_libraries() {
	ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $3 "=" $3 } $1 ~ /^\// { print $1 "=" $1 }'
}

# CONF_POPULATOR is the lib-volume-populator release whose example is built
# as the suite's hello-populator: the proxy serves v1.2.0, not the v1.0.1 the
# suite names (its flags, --mode, --image-name, --namespace and
# --http-endpoint, are the same). The volume-data-source-validator the same
# test deploys is served by no registry or proxy here; the test does not wait
# for it.
CONF_POPULATOR=github.com/kubernetes-csi/lib-volume-populator@v1.2.0

# conf_hello_populator prints the path of the hello-populator binary, built
# once into $K8S_CACHE/bin from the module proxy (its zip has no vendor
# tree: a writable copy is built with -mod=mod).
conf_hello_populator() {
	local bin="$K8S_CACHE/bin/hello-populator" src tmp
	if [[ ! -x $bin ]]; then
		src="$(cd "$K8S_DIR" && GOFLAGS=-mod=mod go mod download -json "$CONF_POPULATOR" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
		[[ -d $src ]] || die "cannot download $CONF_POPULATOR"
		tmp="$(mktemp -d)"
		if ! { cp -r "$src/." "$tmp" && chmod -R u+w "$tmp" && rm -rf "$tmp/vendor" &&
			(cd "$tmp" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$bin.new" ./example/hello-populator) >&2 &&
			mv "$bin.new" "$bin"; }; then
			die "cannot build hello-populator from $CONF_POPULATOR"
		fi
		rm -rf "$tmp"
	fi
	echo "$bin"
}

# conf_skips DRIVER KIND prints the skip file's regular expressions of KIND
# (skip or only) for DRIVER, joined with |.
conf_skips() {
	local scope kind re reason out=()
	while IFS=$'\t' read -r scope kind re reason; do
		[[ -z $scope || $scope == \#* ]] && continue
		[[ -n $reason ]] || die "skip.txt: $re has no reason"
		[[ $kind == "$2" ]] || continue
		[[ $scope == all || ,$scope, == *,$1,* ]] && out+=("$re")
	done <"$CONF_SRC/skip.txt"
	local IFS='|'
	echo "${out[*]}"
}

# conf_ginkgo DRIVER PHASE PROCS FOCUS SKIP runs one phase of one YAML and
# appends ginkgo's verdict to summary.txt.
conf_ginkgo() {
	local driver="$1" phase="$2" procs="$3" focus="$4" skip="$5" start=$SECONDS rc=0
	local log="$CONF_OUT/$driver-$phase.log"
	log "conformance $driver $phase: ginkgo --procs=$procs --focus='$focus' --skip='$skip'"
	(cd "$REPO" && "$CONF_BIN/ginkgo" --procs="$procs" --timeout=6h --no-color --poll-progress-after=10m \
		--focus="$focus" --skip="$skip" --junit-report="$driver-$phase.xml" --output-dir="$CONF_OUT" \
		"$CONF_BIN/e2e.test" -- \
		--kubeconfig="$SHARE/k8s/pki/admin.kubeconfig" --kubectl-path="$K8S_BIN/kubectl" \
		--storage.testdriver="$CONF_SRC/$driver.yaml" --repo-root="$REPO" \
		--report-dir="$CONF_OUT/$driver-$phase") >"$log" 2>&1 || rc=$?
	printf '%-8s %-9s %5ss  %s  %s\n' "$driver" "$phase" "$((SECONDS - start))" \
		"$(grep -m1 -E '^Ran [0-9]+ of [0-9]+ Specs' "$log" || echo 'no "Ran" line')" \
		"$(grep -m1 -E '[0-9]+ Passed \| [0-9]+ Failed' "$log" || echo "ginkgo exit $rc, see $log")" >>"$CONF_OUT/summary.txt"
	# No [FAIL] line is the good case: grep's exit 1 must not end conf_run
	# (set -e with pipefail did, after a phase with no failure).
	grep -E '^\s*\[FAIL\]' "$log" | sed "s/^/$driver $phase: /" >>"$CONF_OUT/failures.txt" || true
	return 0
}

conf_run() {
	local deadline=$((SECONDS + E2E_TIMEOUT))
	until [[ -e $RESULTS/cluster-ready ]]; do
		if [[ -e $RESULTS/exit-code ]] || ((SECONDS > deadline)); then
			log "conformance: guest a never handed the cluster over"
			return 1
		fi
		sleep 5
	done
	log "conformance: the cluster is ready after $SECONDS s"
	# The storage capacity the scheduler sees, once a minute, for reading a
	# claim that waited for "enough free storage" against what was published.
	(while [[ ! -e $RESULTS/conformance-done ]]; do
		date -u +%T
		"$K8S_BIN/kubectl" --kubeconfig="$SHARE/k8s/pki/admin.kubeconfig" get csistoragecapacities -A \
			-o custom-columns=CLASS:.storageClassName,NODE:.nodeTopology.matchLabels,CAPACITY:.capacity,MAX:.maximumVolumeSize 2>&1
		sleep 60
	done >"$CONF_OUT/capacities.log") &
	local driver skip only focus procs
	for driver in $CONF_DRIVERS; do
		[[ $driver != group ]] || conf_group_policies || return 1
		# group.yaml's pods all go to node a (a group's volumes share a
		# node), whose kubelet under TCG starts about a pod a minute: with
		# four processes, three three-pod StatefulSets at once all overran
		# the suite's fixed 10 min StatefulSet wait. One at a time, each
		# has the node to itself.
		procs="$CONF_PROCS"
		[[ $driver != group ]] || procs=1
		skip="$(conf_skips "$driver" skip)"
		only="$(conf_skips "$driver" only)"
		focus="External.Storage.*${only:+($only)}.*${K8S_CONFORMANCE_FOCUS:+($K8S_CONFORMANCE_FOCUS)}"
		if [[ " $CONF_PHASES " == *" parallel "* ]]; then
			conf_ginkgo "$driver" parallel "$procs" "$focus" "\[Serial\]${skip:+|$skip}"
		fi
		if [[ " $CONF_PHASES " == *" serial "* ]]; then
			conf_ginkgo "$driver" serial 1 "$focus.*\[Serial\]" "$skip"
		fi
	done
	touch "$RESULTS/conformance-done"
}

# conf_group_policies applies what group.yaml needs before its run: the
# shipped policy that labels a group's contents with their node, and the
# harness's that labels the suite's group snapshot classes with node a, both
# under the cluster's MutatingAdmissionPolicy version. e2e.test before 1.35
# cannot name a group snapshot class, and would skip every group test.
conf_group_policies() {
	local minor api f
	minor="$(k8s_minor)" && api="$(k8s_mutating_policy_api)" || return 1
	if ((minor < 35)); then
		log "conformance: group.yaml needs e2e.test 1.35 or later (its external driver reads GroupSnapshotClass), not $K8S_VERSION"
		return 1
	fi
	for f in "$REPO/packaging/kubernetes/groupsnapshots/80-group-content-node.yaml" "$CONF_SRC/group-class-node.yaml"; do
		sed "s#^apiVersion: admissionregistration.k8s.io/v1\$#apiVersion: $api#" "$f" |
			"$K8S_BIN/kubectl" --kubeconfig="$SHARE/k8s/pki/admin.kubeconfig" apply -f - >&2 || return 1
	done
}

conf_summary() {
	[[ -f $CONF_OUT/summary.txt ]] || {
		log "conformance: no summary (the run did not start)"
		return 1
	}
	log "conformance (ginkgo per test-driver YAML and phase; logs in $CONF_OUT):"
	sed 's/^/[e2e]   /' "$CONF_OUT/summary.txt"
	if [[ -s $CONF_OUT/failures.txt ]]; then
		log "conformance failures:"
		sed 's/^/[e2e]   /' "$CONF_OUT/failures.txt"
		return 1
	fi
}
