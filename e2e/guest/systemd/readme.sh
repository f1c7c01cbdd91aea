#!/bin/bash
# readme.sh — README.md's install and first steps, run as written. Sourced by
# suite.sh; the commands are read from the README in the share, so a change
# to one without the other fails the systemd suite.
set -uo pipefail

# readme_block HEADING prints the commands of the indented block that
# follows the line HEADING in README.md, one a line.
readme_block() {
	awk -v heading="$1" '
		$0 == heading { found = 1; next }
		found && /^    / { started = 1; sub(/^    /, ""); print; next }
		found && started && !/^    / { exit }
	' "$SHARE/README.md"
}

# run_readme_line LINE runs one README command line as an administrator
# types it: in a shell, as root (sudo is a no-op here), answering yes to
# apt's question. A line's comment is what its reader expects: sudoedit
# makes the edit the comment names (KEY=value), the others print the output.
run_readme_line() {
	local line="$1" comment=""
	[[ $line == *"#"* ]] && comment="${line#*# }"
	README_EDIT="$comment" bash -c '
		sudo() { "$@"; }
		sudoedit() {
			local key="${README_EDIT%%=*}"
			grep -Eq "^#?$key=" "$1" && sed -i -E "s|^#?$key=.*|$README_EDIT|" "$1" || echo "$README_EDIT" >>"$1"
		}
		'"$line" 2>&1 < <(yes)
}

# step_readme_install installs the package exactly as README.md's
# "Debian, Ubuntu" block says, from a dist/ holding both architectures'
# packages as make deb leaves it, with the checks of each line's promise.
step_readme_install() {
	local lines=()
	mapfile -t lines < <(readme_block "**Debian, Ubuntu:**")
	check "README.md has the Debian install block" [ "${#lines[@]}" -ge 4 ] || return 1
	mkdir -p "$WORK/dist"
	cp "$SHARE"/dist/*.deb "$WORK/dist/"
	local debs=("$WORK"/dist/*.deb) line out
	check "dist/ holds the packages of two architectures, as make deb leaves it" [ "${#debs[@]}" -ge 2 ] || return 1
	for line in "${lines[@]}"; do
		say "README: $line"
		out="$(cd "$WORK" && run_readme_line "$line")"
		local rc=$?
		echo "$out" | sed 's/^/    /' | tail -n 20
		case "$line" in
		*"apt-get install"*)
			echo "$out" >"$RESULTS/apt-install.log"
			check "the README's apt-get install succeeded" [ "$rc" -eq 0 ] || return 1
			check "dpkg: install ok installed" [ "$(dpkg-query -W -f '${Status}' zfs-csi)" = "install ok installed" ] || return 1
			check "the package of this host's architecture" [ "$(dpkg-query -W -f '${Architecture}' zfs-csi)" = "$(dpkg --print-architecture)" ] || return 1
			check "/etc/default/zfs-csi is a conffile" grep -q /etc/default/zfs-csi <(dpkg-query -W -f '${Conffiles}' zfs-csi) || return 1
			check "the unit is enabled" [ "$(systemctl is-enabled "$UNIT")" = enabled ] || return 1
			check "unconfigured, the unit was not started" [ "$(systemctl is-active "$UNIT")" = inactive ] || return 1
			check "postinst said what to configure" grep -q "ZFS_CSI_PARENT_DATASETS in /etc/default/zfs-csi" <<<"$out" || return 1
			;;
		"systemctl status"*)
			check "the README's systemctl status shows active (running)" grep -q "active (running)" <<<"$out" || return 1
			check "and the status line the README shows" grep -qF "$(sed -E 's/.*Status: "(.*)"$/\1/' <<<"${line#*# }")" <<<"$out" || return 1
			;;
		*"ctl probe"*)
			check "the README's ctl probe says ready" grep -Eq '"ready": *true' <<<"$out" || return 1
			;;
		*)
			check "the README's '$line' succeeded" [ "$rc" -eq 0 ] || return 1
			;;
		esac
	done
	local verify
	verify="$(systemd-analyze verify "$UNIT" 2>&1)"
	check "systemd-analyze verify $UNIT is silent on the installed unit${verify:+ ($verify)}" [ -z "$verify" ] || return 1
	# Read by step (lib.sh), which runs this function.
	# shellcheck disable=SC2034
	STEP_NOTE="README.md's ${#lines[@]} commands as written: $(dpkg-query -W -f '${Package} ${Version} ${Architecture}' zfs-csi), $(prop StatusText)"
}
