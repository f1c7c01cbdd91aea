#!/usr/bin/env bash
# Lints the packages in DIR: lintian on each .deb (overrides ship in the
# package, each with its reason), rpmlint on each .rpm (accepted findings in
# packaging/rpm/rpmlint.toml), and the binary inside each package is checked
# to be built for the package's architecture. Any finding fails.
# lint.sh --install only installs what is missing (make lint-tools: make test
# runs it beside the first Go compilations, and packaging/versions_test.go
# needs rpm), shellcheck for make lint among them.
set -euo pipefail
dir=${1:?usage: lint.sh DIR | lint.sh --install}
cd "$(dirname "$0")/.."

need=()
command -v lintian >/dev/null || need+=(lintian)
command -v rpmlint >/dev/null || need+=(rpmlint)
command -v rpm >/dev/null || need+=(rpm)
command -v rpm2cpio >/dev/null || need+=(rpm2cpio)
command -v cpio >/dev/null || need+=(cpio)
command -v shellcheck >/dev/null || need+=(shellcheck)
# Without recommends: on Debian 12's base 226 packages (74 MB to download,
# 272 MB installed) instead of 357 (161 MB, 590 MB): compilers, X and image
# libraries, dbus. No check is lost: lintian recommends nothing itself, and
# of rpmlint's recommends rpm is named here, groff-base comes with man-db
# (lintian depends on it), and appstream-util would only validate AppStream
# metadata, which the packages do not ship.
if ((${#need[@]})); then
	echo "lint.sh: installing ${need[*]} from Debian"
	sudo=()
	[[ $(id -u) -eq 0 ]] || sudo=(sudo)
	"${sudo[@]}" apt-get update -q >/dev/null || echo "lint.sh: apt-get update reported errors; trying the install anyway"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi
[[ $dir != --install ]] || exit 0

# elf_machine prints the e_machine of an ELF file (62 x86-64, 183 aarch64).
elf_machine() { od -An -tu2 -j18 -N2 "$1" | tr -d ' '; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# examples lists the example files a package listing names, sorted (files
# only: rpm -qd also lists the directories an RPM owns as documentation).
examples() { grep -oE 'examples/(kubernetes(/(snapshots|groupsnapshots|encryption|snapshot-metadata))?|nomad|monitoring)/[^/ ]+\.(yaml|hcl|json)$' | sort; }
want_examples=$(cd packaging && printf '%s\n' kubernetes/*.yaml kubernetes/{snapshots,groupsnapshots,encryption,snapshot-metadata}/*.yaml nomad/*.hcl monitoring/alerts.yaml monitoring/dashboard.json | sed 's|^|examples/|' | sort)
# documents lists the documents beside the README a package listing names.
documents() { grep -oE 'zfs-csi/docs/[^/ ]+\.md$' | sort; }
want_documents=$(printf '%s\n' docs/*.md | sed 's|^|zfs-csi/|' | sort)

declare -A want=([amd64]=62 [arm64]=183 [x86_64]=62 [aarch64]=183)
status=0
for deb in "$dir"/*.deb; do
	out=$(lintian --tag-display-limit 0 --fail-on error,warning "$deb" 2>&1 | grep -v 'running with root privileges' || true)
	if [ -n "$out" ]; then echo "lintian $deb:"; echo "$out"; status=1; fi
	arch=$(dpkg-deb -f "$deb" Architecture)
	dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/sbin/zfs-csi >"$work/bin"
	machine=$(elf_machine "$work/bin")
	if [ "$(dpkg-deb -c "$deb" | awk '{print $6}' | examples)" != "$want_examples" ]; then
		echo "$deb: the examples are not all packaged"; status=1
	fi
	if [ "$(dpkg-deb -c "$deb" | awk '{print $6}' | documents)" != "$want_documents" ]; then
		echo "$deb: the documents (docs/) are not all packaged"; status=1
	fi
	if [ "$machine" != "${want[$arch]:-?}" ]; then echo "$deb: Architecture $arch but the binary's ELF machine is $machine"; status=1; fi
	echo "ok $deb ($arch, ELF machine $machine)"
done
for rpm in "$dir"/*.rpm; do
	out=$(rpmlint -c packaging/rpm/rpmlint.toml "$rpm" 2>&1)
	if ! grep -q ' 0 errors, 0 warnings' <<<"$out"; then echo "rpmlint $rpm:"; echo "$out"; status=1; fi
	arch=$(rpm -qp --qf '%{ARCH}' "$rpm" 2>/dev/null)
	rpm2cpio "$rpm" >"$work/cpio" || true # Debian's rpm2cpio may exit 1 after the whole archive
	cpio -i --quiet --to-stdout /usr/sbin/zfs-csi <"$work/cpio" >"$work/bin"
	machine=$(elf_machine "$work/bin")
	if [ "$(rpm -qlp "$rpm" 2>/dev/null | examples)" != "$want_examples" ] ||
		[ "$(rpm -qdp "$rpm" 2>/dev/null | examples)" != "$want_examples" ]; then
		echo "$rpm: the examples are not all packaged as documentation"; status=1
	fi
	if [ "$(rpm -qdp "$rpm" 2>/dev/null | documents)" != "$want_documents" ]; then
		echo "$rpm: the documents (docs/) are not all packaged as documentation"; status=1
	fi
	if [ "$machine" != "${want[$arch]:-?}" ]; then echo "$rpm: arch $arch but the binary's ELF machine is $machine"; status=1; fi
	echo "ok $rpm ($arch, ELF machine $machine)"
done
exit $status
