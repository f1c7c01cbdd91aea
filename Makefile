# zfs-csi — build, unit tests, and the real-ZFS harness (e2e/README.md).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
ZFS_VERSION ?= 2.3
export ZFS_VERSION

# helm, pinned, built from the Go module proxy into out/tools on first use:
# make chart and make e2e-k8s run it. make test does not build it: the chart's
# tests (packaging/kubernetes/helm_test.go, packaging/checks) run helm
# template, lint, package and show chart through $(HELMTOOL), helm's Go
# packages at HELM_VERSION (packaging/checks/go.mod pins the same; a test
# holds the two equal), which builds in a fraction of helm's cold build.
HELM_VERSION := v3.19.2
HELM := out/tools/helm-$(HELM_VERSION)
HELMTOOL := out/tools/helmtool
# The Kubernetes version helm assumes without --kube-version (and lints
# against): helm's own release builds link in its client-go's (v0.34 for
# v3.19, so 1.34); a plain go build says 1.20, which the chart's kubeVersion
# (>=1.34.0-0) refuses. Both builds here link in what the release does.
HELM_LDFLAGS := $(foreach pkg,chartutil lint/rules,-X helm.sh/helm/v3/pkg/$(pkg).k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/$(pkg).k8sVersionMinor=34)

.PHONY: build test e2e demo e2e-image e2e-systemd e2e-k8s e2e-k8s-conformance e2e-nomad bench bench-k8s

# A static, stripped binary (-s -w: no symbol table or DWARF).
LDFLAGS := -s -w -X main.version=$(VERSION)

# -trimpath as the packages' builds (deb rpm below), so that the amd64 one
# reuses this build's compiled packages instead of compiling them again.
build:
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o out/zfs-csi .

# Everything is built as the packages are (static, no cgo, -trimpath), so one
# compilation of each package serves go build, go vet, go test, staticcheck
# and the amd64 package. Two halves, each beside work that needs little CPU or
# other packages: the download of packaging/checks' and e2e's modules and,
# beside it, apt's install of the linters and the build of staticcheck
# (lint-tools, $(STATICCHECK); packaging/versions_test.go compares versions
# with dpkg's and rpm's rules, so it is done before go test) run while go
# build, go vet and helmtool compile; then the packages are built and linted
# (lint-packages: nfpm, the arm64 binary, lintian, rpmlint), and after them the
# sources (lint: gofmt, staticcheck, shellcheck), while the Go tests run. The
# packages come first so that go test has compiled the main module's test
# packages before staticcheck asks go for them: never two go commands on the
# same packages at once, each would compile them. The background half's
# output is printed when it ends, from out/lint-tools.log and out/lint.log;
# either half failing fails make test. The e2e module (the real-ZFS tests,
# the bench, the results table and both clusters' suites) builds the main
# module's packages from this checkout (its replace), with the same
# settings, so they compile once for both.
PACKAGE_GOFLAGS = $(strip $(filter-out -trimpath,$(shell go env GOFLAGS)) -trimpath)
test lint: export CGO_ENABLED := 0
test lint: export GOFLAGS = $(PACKAGE_GOFLAGS)
test:
	@mkdir -p out
	$(MAKE) --no-print-directory -j2 -Otarget test-downloads lint-tools $(STATICCHECK) >out/lint-tools.log 2>&1 & tools=$$!; \
	go build ./... && go vet ./... && $(MAKE) --no-print-directory helmtool; go=$$?; \
	wait $$tools; rc=$$?; cat out/lint-tools.log; [ $$go = 0 ] && [ $$rc = 0 ]
	$(MAKE) --no-print-directory -k lint-packages lint >out/lint.log 2>&1 & lint=$$!; \
	$(MAKE) --no-print-directory test-go; go=$$?; \
	wait $$lint; rc=$$?; cat out/lint.log; [ $$go = 0 ] && [ $$rc = 0 ]

# The modules packaging/checks and e2e need (go mod download: those of
# their packages and tests), fetched while the main module compiles.
.PHONY: test-downloads
test-downloads:
	cd packaging/checks && go mod download
	cd e2e && go mod download

# make test's Go tests, after go build, go vet, helmtool and lint-tools.
.PHONY: test-go
test-go:
	HELM='$(CURDIR)/$(HELMTOOL)' go test ./...
	cd packaging/checks && go vet ./... && HELM='$(CURDIR)/$(HELMTOOL)' go test ./...
	cd e2e && go vet ./... && go test ./...

# Everything the e2e targets build, without booting a guest: go vet of the
# e2e module as each of its builds sees it (e2e/tests only with -tags e2e),
# and the binaries make e2e, bench, e2e-k8s and e2e-nomad compile (e2e/run.sh,
# e2e/k8s/host.sh and build-images.sh, e2e/nomad/host.sh) into out/e2e-build.
# Quick next to a guest's boot; make test leaves the linking out and keeps
# go vet and go test.
E2E_BUILD := $(CURDIR)/out/e2e-build
.PHONY: e2e-build
e2e-build:
	mkdir -p '$(E2E_BUILD)'
	cd e2e && go vet ./... && go vet -tags e2e ./...
	cd e2e && CGO_ENABLED=0 go test -c -tags e2e -o '$(E2E_BUILD)/e2e.test' ./tests
	cd e2e && CGO_ENABLED=0 go build -o '$(E2E_BUILD)/bench' ./bench
	cd e2e && go build -o '$(E2E_BUILD)/results' ./results
	cd e2e && CGO_ENABLED=0 go test -c -o '$(E2E_BUILD)/k8s.test' ./k8s/suite
	cd e2e && CGO_ENABLED=0 go build -o '$(E2E_BUILD)/' ./k8s/cmd/...
	cd e2e && CGO_ENABLED=0 go test -c -o '$(E2E_BUILD)/nomad.test' ./nomad/suite

# Rebuilt on every make test (go's cache makes that a link at most), so it
# never lags behind packaging/checks/go.mod.
.PHONY: helmtool
helmtool:
	mkdir -p out/tools
	cd packaging/checks && go build -ldflags '$(HELM_LDFLAGS)' -o '$(CURDIR)/$(HELMTOOL)' ./helmtool


.PHONY: helm chart
helm: $(HELM)

# The Helm chart as $(CHART_DIR)/zfs-csi-<version>.tgz, its version and
# appVersion the packages' (PKG_VERSION below): a chart and the .deb and .rpm
# of one build name one release (packaging/kubernetes/helm_test.go checks).
CHART_DIR ?= dist
chart: $(HELM)
	mkdir -p '$(CHART_DIR)'
	$(HELM) package packaging/helm/zfs-csi --version '$(PKG_VERSION)' --app-version '$(PKG_VERSION)' --destination '$(CHART_DIR)'

$(HELM):
	mkdir -p out/tools
	cd / && GOBIN='$(CURDIR)/out/tools/.helmbin' CGO_ENABLED=0 go install -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv out/tools/.helmbin/helm $@ && rmdir out/tools/.helmbin

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
# mount) commands doing the same work, one table (e2e/bench; ~75 min under TCG
# on a 2-core host, 4,386 s measured, most of it section 9 making and listing
# 10,000 volumes; a slower host takes longer). BENCH_ARGS=-quick checks the
# bench itself in a few minutes; docs/benchmarks.md tells the sections.
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

# A real Kubernetes cluster: the control plane (etcd, kube-apiserver,
# controller-manager, scheduler) on the host, two ZFS guests as its nodes with
# our .deb, kubelet, containerd and the shipped manifests unchanged; the
# scenarios of e2e/k8s/suite. Everything is built from the Go module proxy and
# Debian (no registry): the first run builds Kubernetes, the sidecars and a
# guest image with containerd (cached in ~/.cache/zfs-csi-e2e). Not part of
# make e2e or CI.
e2e-k8s:
	e2e/run.sh k8s

# The same cluster judged by Kubernetes' own External Storage suite (e2e.test
# built from k8s.io/kubernetes, one run per test-driver YAML of
# e2e/k8s/conformance, skips with reasons in its skip.txt); ginkgo's verdicts
# in out/e2e-k8s/conformance. Hours under TCG. Not part of make e2e or CI.
e2e-k8s-conformance:
	K8S_CONFORMANCE=1 e2e/run.sh k8s

# What a Kubernetes user waits for, on the same cluster: the Latency scenario
# (claims, snapshots and restores in batches; figures, no timed assertion),
# after the two it needs and before the check that nothing is left. make
# e2e-k8s skips it: its batches are a fifth of a whole run under TCG.
bench-k8s:
	K8S_BENCH=1 E2E_GO_TEST_RUN='^TestCluster/(Registration|Manifests|Latency|NothingLeft)$$' e2e/run.sh k8s

# A real Nomad cluster of two hosts (two ZFS guests joined by a link): node-a
# runs the server and a client, node-b a client, each with our .deb and its
# own pool; the shipped job (exec driver) and volume specs; the scenarios of
# e2e/nomad/suite. Nomad is built from the Go module proxy once (cached in
# ~/.cache/zfs-csi-e2e). Not part of make e2e or CI.
e2e-nomad:
	e2e/run.sh nomad

# Distro packages into dist/ (packaging/nfpm.yaml): the static binary in
# /usr/sbin, systemd/zfs-csi.service, /etc/default/zfs-csi, and the Helm
# chart of the same version in /usr/share/zfs-csi/helm (helm install takes
# it from there). nfpm is pinned
# here (v2.44.2 is the newest that installs from the Go module proxy) and built
# into out/tools on first use. One package per architecture in PKG_ARCHES (the
# binary is static: cross-compiled). Package versions sort by commit time:
# tag v1.2.3 → 1.2.3; a commit after it → 1.2.3+git<UTC commit time>.<hash>
# (0.0.0+git… before the first tag), after 1.2.3 and before 1.2.4 for dpkg and
# rpm alike (packaging/versions_test.go checks the order with both).
NFPM_VERSION := v2.44.2
NFPM := out/tools/nfpm-$(NFPM_VERSION)
COMMIT_TIME := $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S 2>/dev/null || echo 0)
COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LAST_TAG := $(shell git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null | sed 's/^v//')
PKG_VERSION ?= $(shell echo '$(VERSION)' | grep -Eq '^v?[0-9]+\.[0-9]+\.[0-9]+$$' && echo '$(VERSION)' | sed 's/^v//' || echo '$(or $(LAST_TAG),0.0.0)+git$(COMMIT_TIME).$(COMMIT)')
PKG_ARCHES ?= amd64 arm64

.PHONY: deb rpm verify-unit lint lint-packages lint-tools pkg-version pkg-chart release

pkg-version:
	@echo '$(PKG_VERSION)'

# lintian and rpmlint on every package, and each binary's ELF machine against
# its package's architecture (packaging/lint.sh installs the linters from
# Debian when they are missing).
lint-packages: deb rpm
	packaging/lint.sh dist

# lintian, rpmlint, rpm, rpm2cpio, cpio and shellcheck from Debian, when
# missing.
lint-tools:
	packaging/lint.sh --install

# staticcheck, pinned, built from the Go module proxy into out/tools on first
# use (v0.8.2 is the newest the proxy serves; it knows go 1.26).
STATICCHECK_VERSION := v0.8.2
STATICCHECK := out/tools/staticcheck-$(STATICCHECK_VERSION)

$(STATICCHECK):
	mkdir -p out/tools
	cd / && GOBIN='$(CURDIR)/out/tools/.staticcheckbin' CGO_ENABLED=0 go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv out/tools/.staticcheckbin/staticcheck $@ && rmdir out/tools/.staticcheckbin

# Every shell script, so that a new one is linted without being listed: by
# its name (*.sh, *.bash) or its #! line (.ci/run, the packages' maintainer
# scripts, the guest image's init), as licence_test.go's buildFile tells
# them. out/ and dist/ hold only build output.
SHELL_SCRIPTS = $(shell find . \( -path ./.git -o -path ./out -o -path ./dist \) -prune -o -type f -print0 | \
	xargs -0 awk 'FNR == 1 { if (FILENAME ~ /\.(sh|bash)$$/ || /^\#!.*[\/ ](ba|da|k)?sh([ \t]|$$)/) print FILENAME; nextfile }')

# The sources: every Go file gofmt'ed; staticcheck's default checks on the
# three modules, the e2e one also as e2e/tests builds it (-tags e2e; the two
# builds' findings merged, so code only the e2e build uses is not unused);
# shellcheck on every shell script (.shellcheckrc: sourced files are
# followed). Each accepted finding is silenced where it is, with its reason.
lint: lint-tools $(STATICCHECK)
	@unformatted="$$(gofmt -l $$(find . \( -path ./.git -o -path ./out -o -path ./dist \) -prune -o -name '*.go' -print))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: not gofmt'ed:"; echo "$$unformatted"; exit 1; fi
	$(STATICCHECK) ./...
	cd packaging/checks && '$(CURDIR)/$(STATICCHECK)' ./...
	cd e2e && printf 'untagged:\ne2e: -tags=e2e\n' | '$(CURDIR)/$(STATICCHECK)' -matrix ./...
	shellcheck $(SHELL_SCRIPTS)

# Each architecture's binary stays in out/pkg/ARCH, where make release's
# SBOM reads what was linked into it.
deb rpm: build verify-unit $(NFPM) pkg-chart
	mkdir -p dist out/pkg && rm -f dist/*.$@
	gzip -9n < packaging/zfs-csi.8 > out/pkg/zfs-csi.8.gz
	for arch in $(PKG_ARCHES); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch go build -trimpath -ldflags "$(LDFLAGS)" -o out/pkg/$$arch/zfs-csi . && \
		PKG_VERSION='$(PKG_VERSION)' PKG_ARCH=$$arch $(NFPM) package --config packaging/nfpm.yaml --packager $@ --target dist/ || exit 1; \
	done

# The chart the packages carry, out/pkg/zfs-csi-$(PKG_VERSION).tgz: make
# chart with helmtool, whose package is helm's (chartutil.Save), so neither
# make test nor make release builds helm itself.
pkg-chart: $(HELMTOOL)
	rm -f out/pkg/zfs-csi-*.tgz
	$(MAKE) --no-print-directory chart CHART_DIR=out/pkg HELM='$(CURDIR)/$(HELMTOOL)' PKG_VERSION='$(PKG_VERSION)'

$(HELMTOOL):
	$(MAKE) --no-print-directory helmtool

# A release in dist/, from a clean start (docs/release.md): the .deb and
# .rpm of each architecture in PKG_ARCHES, the chart they carry, an SPDX
# SBOM of the binaries (packaging/checks/sbom: what the Go linker recorded
# in each, no network), and SHA256SUMS of them all. The packages are linted
# (lint-packages), and packaging/checks' TestRelease checks what dist/ holds:
# those files and no other, the sums, the chart inside every package, and
# helm install of the chart as a package installs it, as docs/release.md
# shows. Tag the commit vX.Y.Z first for a release version; elsewhere the
# version is the commit's (make pkg-version).
RELEASE_CREATED := $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
release:
	rm -rf dist
	$(MAKE) --no-print-directory helmtool
	$(MAKE) --no-print-directory lint-packages PKG_VERSION='$(PKG_VERSION)'
	cp out/pkg/zfs-csi-$(PKG_VERSION).tgz dist/
	cd packaging/checks && go run ./sbom -version '$(PKG_VERSION)' -created '$(or $(RELEASE_CREATED),1970-01-01T00:00:00Z)' \
		-o '$(CURDIR)/dist/zfs-csi-$(PKG_VERSION).spdx.json' $(foreach arch,$(PKG_ARCHES),'$(CURDIR)/out/pkg/$(arch)/zfs-csi')
	cd dist && sha256sum -- $$(ls | grep -vx SHA256SUMS) > SHA256SUMS
	cd packaging/checks && RELEASE_DIR='$(CURDIR)/dist' RELEASE_VERSION='$(PKG_VERSION)' RELEASE_ARCHES='$(PKG_ARCHES)' \
		HELM='$(CURDIR)/$(HELMTOOL)' go test -count=1 -run '^TestRelease' .
	@echo 'make release: dist/ holds'; cd dist && ls -l

$(NFPM):
	mkdir -p out/tools
	cd / && GOBIN='$(CURDIR)/out/tools/.gobin' CGO_ENABLED=0 go install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
	mv out/tools/.gobin/nfpm $@ && rmdir out/tools/.gobin

# systemd-analyze verify of the unit (any warning fails).
verify-unit: build
	systemd/verify.sh out/zfs-csi
