# zfs-csi — build, unit tests, and the real-ZFS harness (e2e/README.md).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
ZFS_VERSION ?= 2.3
export ZFS_VERSION

.PHONY: build test e2e demo e2e-image e2e-systemd bench

build:
	CGO_ENABLED=0 go build -ldflags "-X main.version=$(VERSION)" -o out/zfs-csi .

test:
	go build ./... && go vet ./... && go test ./...

# Boots a Debian guest with real ZFS under qemu (TCG) and runs the smoke check,
# csi-sanity and the e2e Go tests in it. First run builds the guest image (~10 min).
# Then the package on a systemd-booted guest (make e2e-systemd, ~15 min under
# TCG); E2E_SYSTEMD=0 skips that part.
e2e:
	e2e/run.sh e2e
	@if [ "$(E2E_SYSTEMD)" != 0 ]; then e2e/run.sh systemd; fi

# A short guided tour of the driver on real ZFS, inside the same guest.
demo:
	e2e/run.sh demo

# The benchmark in the same guest: each CSI call against the bare zfs (and
# mount) commands doing the same work, one table (e2e/bench; 11 min under TCG
# on a 2-core host, a slower host takes longer). BENCH_ARGS=-quick checks the
# bench itself in a few minutes.
bench:
	e2e/run.sh bench

# Only build (or find) the cached guest image.
e2e-image:
	e2e/run.sh image

# The package on a systemd-booted guest: apt-get install of the .deb, the
# service READY, csi-sanity on its socket, restart under published volumes,
# Kubernetes mode, remove and purge leaving every dataset alone.
e2e-systemd:
	e2e/run.sh systemd

# Distro packages into dist/ (packaging/nfpm.yaml): the static binary in
# /usr/sbin, systemd/zfs-csi.service, /etc/default/zfs-csi. nfpm is pinned
# here (v2.44.2 is the newest that installs from the Go module proxy) and built
# into out/tools on first use. Package versions: tag v1.2.3 → 1.2.3; an
# untagged commit → 0.0.0+git<commit>.
NFPM_VERSION := v2.44.2
NFPM := out/tools/nfpm-$(NFPM_VERSION)
PKG_VERSION ?= $(shell echo '$(VERSION)' | sed -E 's/^v?([0-9]+\.[0-9])/\1/; t ok; s/^/0.0.0+git/; :ok; s/-/./g')
PKG_ARCH ?= $(shell go env GOARCH)

.PHONY: deb rpm verify-unit

deb rpm: build verify-unit $(NFPM)
	mkdir -p dist && rm -f dist/*.$@
	PKG_VERSION='$(PKG_VERSION)' PKG_ARCH='$(PKG_ARCH)' $(NFPM) package --config packaging/nfpm.yaml --packager $@ --target dist/

$(NFPM):
	mkdir -p out/tools
	cd / && GOBIN='$(CURDIR)/out/tools/.gobin' CGO_ENABLED=0 go install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
	mv out/tools/.gobin/nfpm $@ && rmdir out/tools/.gobin

# systemd-analyze verify of the unit (any warning fails).
verify-unit: build
	systemd/verify.sh out/zfs-csi
