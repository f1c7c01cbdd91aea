#!/usr/bin/env bash
# host-deps.sh — install what the harness needs on a Debian host, only if missing.
# Fast when everything is there (no apt call at all), so every `make e2e` runs it.
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=config.sh
source "$E2E_DIR/config.sh"

# Commands we call, each provided by one of HOST_PACKAGES.
needed=(qemu-system-x86_64 qemu-img mmdebstrap mkfs.ext4 timeout flock)
[[ ${E2E_HOST_ETCD:-} == 1 ]] && needed+=(etcd gcc pkg-config)
missing=()
for cmd in "${needed[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
done
[[ ${E2E_HOST_ETCD:-} != 1 ]] || [[ -f /usr/include/seccomp.h ]] || missing+=(seccomp.h)
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "[deps] missing ${missing[*]}: installing ${HOST_PACKAGES[*]} with apt"
command -v apt-get >/dev/null || {
	echo "[deps] ERROR: no apt-get; install ${HOST_PACKAGES[*]} by hand" >&2
	exit 1
}
sudo=()
[[ $(id -u) -eq 0 ]] || sudo=(sudo)
# A third-party source that cannot be reached makes `apt-get update` fail even
# though Debian's own lists were refreshed; the install below is the real check.
"${sudo[@]}" apt-get update -q || echo "[deps] warning: apt-get update reported errors; trying the install anyway"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${HOST_PACKAGES[@]}"
