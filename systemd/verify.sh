#!/usr/bin/env bash
# verify.sh BINARY — `systemd-analyze verify` of the units in systemd/, in a
# throwaway root that holds the unit, BINARY at /usr/sbin/zfs-csi (verify
# checks that ExecStart= is executable) and the host's own units (for the
# targets the unit names). Any warning fails: verify itself exits 0 on
# unknown keys and bad values.
set -euo pipefail

unit_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
binary="${1:?usage: systemd/verify.sh path/to/zfs-csi}"
command -v systemd-analyze >/dev/null ||
	{ echo "verify.sh: systemd-analyze is missing (Debian: apt-get install systemd)" >&2; exit 1; }

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/sbin" "$root/usr/lib/systemd" "$root/etc/systemd/system"
cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
install -m 0755 "$binary" "$root/usr/sbin/zfs-csi"
units=(zfs-csi.service zfs-csi-nomad.service)
for unit in "${units[@]}"; do
	install -m 0644 "$unit_dir/$unit" "$root/etc/systemd/system/$unit"
done

for unit in "${units[@]}"; do
	output="$(systemd-analyze --root="$root" verify "$root/etc/systemd/system/$unit" 2>&1)" || {
		echo "$output" >&2
		echo "verify.sh: systemd-analyze verify of $unit failed" >&2
		exit 1
	}
	if [[ -n $output ]]; then
		echo "$output" >&2
		echo "verify.sh: systemd-analyze verify warned about $unit" >&2
		exit 1
	fi
done
echo "systemd-analyze verify: ${units[*]} OK ($(systemd --version | sed -n 1p))"
