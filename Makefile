# zfs-csi — build, unit tests, and the real-ZFS harness (e2e/README.md).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
ZFS_VERSION ?= 2.3
export ZFS_VERSION

.PHONY: build test e2e demo e2e-image

build:
	CGO_ENABLED=0 go build -ldflags "-X main.version=$(VERSION)" -o out/zfs-csi .

test:
	go build ./... && go vet ./... && go test ./...

# Boots a Debian guest with real ZFS under qemu (TCG) and runs the smoke check,
# csi-sanity and the e2e Go tests in it. First run builds the guest image (~10 min).
e2e:
	e2e/run.sh e2e

# A short guided tour of the driver on real ZFS, inside the same guest.
demo:
	e2e/run.sh demo

# Only build (or find) the cached guest image.
e2e-image:
	e2e/run.sh image
