#!/bin/bash
# boot.sh — PID 1 of a systemd-booted e2e guest (make e2e-systemd). init.sh
# execs it when share/mode is "systemd", before it mounts or starts anything.
#
# It installs a oneshot unit that runs suite.sh once the system is up, keeps
# the console and the offline guest quiet, and hands PID 1 to systemd, so the
# package is tested on a host booted the way real hosts are: systemd-udevd,
# journald, the zfs-*.service units from zfsutils-linux, deb-systemd-helper.
# The root disk is a throwaway overlay: what this writes under /etc is gone
# after the run.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
SUITE=/share/guest/$(cat /share/mode)/suite.sh

if [[ ! -x /lib/systemd/systemd || ! -f $SUITE ]]; then
	echo "E2E-BOOTSTRAP-FAILED: no /lib/systemd/systemd or no $SUITE"
	echo o >/proc/sysrq-trigger
	sleep 30
fi

cat >/etc/systemd/system/zfs-csi-e2e.service <<UNIT
[Unit]
Description=zfs-csi e2e: the package on a systemd-booted host
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/bin/bash $SUITE
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity
UNIT
mkdir -p /etc/systemd/system/multi-user.target.wants
ln -sf ../zfs-csi-e2e.service /etc/systemd/system/multi-user.target.wants/zfs-csi-e2e.service

# No login prompt on the serial console (it would interleave with the suite's
# output) and no apt timers in a guest without network.
for unit in serial-getty@ttyS0.service getty@tty1.service apt-daily.timer apt-daily-upgrade.timer; do
	ln -sf /dev/null "/etc/systemd/system/$unit"
done

echo "=== handing PID 1 to systemd ($(/lib/systemd/systemd --version | sed -n 1p))"
exec /lib/systemd/systemd
