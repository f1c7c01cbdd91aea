#!/bin/bash
# record.sh recorded the zfs/zpool output in this folder (OpenZFS 2.3.2, the
# e2e guest image). It runs as PID 1 of that guest: put it at
# <share>/guest/init.sh, make <share>/results, boot the image as e2e/run.sh
# boot_guest does with -virtfs path=<share>, and after the power-off copy
# results/<name>.out (stdout), .err (stderr), .rc and .argv from there.
# Rerun it on another OpenZFS line (ZFS_VERSION=2.1) to compare the texts.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C
R=/share/results
mkdir -p /dev/pts /run /tmp /mnt
mount -t tmpfs tmpfs /run; mount -t tmpfs tmpfs /tmp
/lib/systemd/systemd-udevd --daemon; udevadm trigger --action=add; udevadm settle --timeout=60
modprobe zfs || { echo "no zfs" > $R/FAILED; echo o > /proc/sysrq-trigger; sleep 60; }
zpool create -f tank /dev/vdb
N=0
rec() { # rec NAME CMD...: stdout, stderr, exit code and argv of one command
	local name=$1; shift
	N=$((N+1))
	printf '%s\n' "$@" > "$R/$name.argv"
	"$@" > "$R/$name.out" 2> "$R/$name.err"
	echo $? > "$R/$name.rc"
}
zfs version > $R/version.txt 2>&1
U=zfs.csi.dev:csi-name,zfs.csi.dev:managed
L=name,type,origin,used,referenced,available,logicalused,refquota,refreservation,volsize,volblocksize,creation,readonly,clones,defer_destroy,$U
M=(-o zfs.csi.dev:managed=true)
rec setup-csi zfs create -o mountpoint=legacy tank/csi
rec setup-pvc-a zfs create -o mountpoint=legacy -o refquota=1073741824 -o zfs.csi.dev:csi-name=pvc-a "${M[@]}" tank/csi/pvc-a
rec setup-pvc-b zfs create -V 1073741824 -o volblocksize=16384 -o zfs.csi.dev:csi-name=pvc-b "${M[@]}" tank/csi/pvc-b
rec setup-pvc-thin zfs create -s -V 2147483648 -o volblocksize=16384 -o zfs.csi.dev:csi-name=pvc-thin "${M[@]}" tank/csi/pvc-thin
rec setup-pvc-ro zfs create -o mountpoint=legacy -o readonly=on -o zfs.csi.dev:csi-name=pvc-ro tank/csi/pvc-ro
rec setup-snap-1 zfs snapshot -o zfs.csi.dev:csi-name=snap-1 "${M[@]}" tank/csi/pvc-a@snap-1
rec setup-snap-2 zfs snapshot -o zfs.csi.dev:csi-name=snap-2 "${M[@]}" tank/csi/pvc-a@snap-2
rec setup-snap-3 zfs snapshot -o zfs.csi.dev:csi-name=snap-3 "${M[@]}" tank/csi/pvc-b@snap-3
rec setup-pvc-c zfs clone -o mountpoint=legacy -o zfs.csi.dev:csi-name=pvc-c "${M[@]}" tank/csi/pvc-a@snap-1 tank/csi/pvc-c
rec setup-pvc-d zfs clone -o mountpoint=legacy -o zfs.csi.dev:csi-name=pvc-d "${M[@]}" tank/csi/pvc-a@snap-1 tank/csi/pvc-d
rec setup-pvc-e zfs clone -o mountpoint=legacy -o zfs.csi.dev:csi-name=pvc-e "${M[@]}" tank/csi/pvc-a@snap-2 tank/csi/pvc-e
rec setup-defer zfs destroy -d tank/csi/pvc-a@snap-2
rec setup-set zfs set zfs.csi.dev:managed=false readonly=off tank/csi/pvc-d
# what List runs
rec list-filesystems zfs list -H -p -o $L -t filesystem -r tank/csi
rec list-volumes zfs list -H -p -o $L -t volume -r tank/csi
rec list-snapshots zfs list -H -p -o $L -t snapshot -r tank/csi
rec list-all zfs list -H -p -o $L -t filesystem,volume,snapshot -r tank/csi
rec list-clone zfs list -H -p -o $L -t filesystem,volume,snapshot -d 0 tank/csi/pvc-c
rec list-get-snapshot zfs list -H -p -o $L -t filesystem,volume,snapshot -d 0 tank/csi/pvc-a@snap-1
rec list-partial zfs list -H -p -o $L -t filesystem,volume,snapshot -d 0 tank/csi/pvc-a tank/csi/pvc-gone tank/csi/pvc-b tank/csi/pvc-lost@snap-9
rec list-missing-pool zfs list -H -p -o $L -t filesystem,volume -d 0 nopool/csi
rec list-depth1 zfs list -H -p -o name -t filesystem,volume,snapshot -d 1 tank/csi/pvc-b tank/csi/pvc-a
rec list-overlap zfs list -H -p -o name -t filesystem -d 1 tank/csi tank/csi/pvc-a
# how depth and -t interact
rec depth-snaponly-noflag zfs list -H -o name -t snapshot tank/csi/pvc-a
rec depth-snaponly-d0 zfs list -H -o name -t snapshot -d 0 tank/csi/pvc-a
rec depth-snaponly-d0-snaproot zfs list -H -o name -t snapshot -d 0 tank/csi/pvc-a@snap-1
rec depth-snaponly-noflag-snaproot zfs list -H -o name -t snapshot tank/csi/pvc-a@snap-1
rec depth-all-noflag-snaproot zfs list -H -o name -t filesystem,volume,snapshot tank/csi/pvc-a@snap-1
rec depth-fsvol-noflag-snaproot zfs list -H -o name -t filesystem,volume tank/csi/pvc-a@snap-1
rec depth-fsvol-d0-snaproot zfs list -H -o name -t filesystem,volume -d 0 tank/csi/pvc-a@snap-1
rec depth-vol-noflag-fsroot zfs list -H -o name -t volume tank/csi/pvc-a
rec depth-vol-d0-fsroot zfs list -H -o name -t volume -d 0 tank/csi/pvc-a
rec depth-fs-noflag-volroot zfs list -H -o name -t filesystem tank/csi/pvc-b
rec depth-fs-d0-volroot zfs list -H -o name -t filesystem -d 0 tank/csi/pvc-b
rec depth-none-d0 zfs list -H -o name -t filesystem -d 0
# values
rec get-clones zfs get -H -p -o name,property,value clones,origin,defer_destroy tank/csi/pvc-b@snap-3 tank/csi/pvc-a
rec set-tab zfs set "zfs.csi.dev:csi-name=a$(printf '\t')b" tank/csi/pvc-ro
rec set-newline zfs set "zfs.csi.dev:csi-name=a
b" tank/csi/pvc-thin
rec set-dash zfs set zfs.csi.dev:managed=- tank/csi/pvc-ro
rec list-odd-values zfs list -H -p -o $L -t filesystem,volume -d 0 tank/csi/pvc-ro tank/csi/pvc-thin
rec list-bad-prop zfs list -H -p -o name,zfs.csi.dev -d 0 tank/csi
rec list-bad-prop2 zfs list -H -p -o name,bogus -d 0 tank/csi
rec zpool-list zpool list -H -p -o name,health,size,allocated,free,fragmentation tank
rec zpool-list-missing zpool list -H -p -o name,health,size,allocated,free,fragmentation nopool
# errors
rec err-create-exists zfs create -o mountpoint=legacy tank/csi/pvc-a
rec err-create-noparent zfs create tank/csi/missing/pvc-x
rec err-create-nopool zfs create nopool/csi
rec err-create-volsize-multiple zfs create -V 1000 -o volblocksize=16384 tank/csi/v-bad
rec err-create-volsize-zero zfs create -V 0 tank/csi/v-zero
rec err-create-index zfs create -o compression=bogus tank/csi/x
rec err-create-number zfs create -o refquota=ten tank/csi/x
rec err-create-quota-zero zfs create -o refquota=0 tank/csi/x
rec err-create-unknown-prop zfs create -o bogus=1 tank/csi/x
rec err-create-wrong-type zfs create -o volblocksize=16384 tank/csi/x
rec err-create-too-large zfs create -V 99999999999999999999 tank/csi/x
rec err-create-badchar zfs create "tank/csi/pvc x%"
rec err-create-toolong zfs create "tank/csi/$(printf 'a%.0s' {1..300})"
rec err-create-nospace zfs create -V 100G tank/csi/huge
rec err-create-sparse-fs zfs create -s tank/csi/x
rec err-set-readonly zfs set used=1 tank/csi/pvc-a
rec err-set-refquota-small zfs set refquota=1 tank/csi/pvc-c
rec err-set-refreservation zfs set refreservation=100G tank/csi/pvc-b
rec err-set-missing zfs set zfs.csi.dev:managed=true tank/csi/pvc-gone
rec err-snapshot-exists zfs snapshot tank/csi/pvc-a@snap-1
rec err-snapshot-missing zfs snapshot tank/csi/pvc-gone@snap
rec err-clone-exists zfs clone tank/csi/pvc-a@snap-1 tank/csi/pvc-c
rec err-clone-missing-snap zfs clone tank/csi/pvc-a@gone tank/csi/x
rec err-clone-noparent zfs clone tank/csi/pvc-a@snap-1 tank/csi/missing/x
rec err-destroy-missing zfs destroy tank/csi/pvc-gone
rec err-destroy-missing-snap zfs destroy tank/csi/pvc-a@gone
rec err-destroy-missing-fs-snap zfs destroy tank/csi/pvc-gone@snap
rec err-destroy-children zfs destroy tank/csi/pvc-a
rec err-destroy-clones zfs destroy tank/csi/pvc-a@snap-1
rec err-destroy-defer-fs zfs destroy -d tank/csi/pvc-c
rec err-destroy-pool zfs destroy tank
mount -t zfs tank/csi/pvc-c /mnt
sh -c "cd /mnt && exec sleep 600" & holder=$!
sleep 1
rec err-destroy-busy zfs destroy tank/csi/pvc-c
kill $holder; sleep 1; umount /mnt
rec err-nobody-create setpriv --reuid=65534 --regid=65534 --clear-groups zfs create tank/csi/nobody
rec err-nobody-list setpriv --reuid=65534 --regid=65534 --clear-groups zfs list -H -o name tank/csi
# send | receive
zfs send tank/csi/pvc-a@snap-1 > /tmp/stream 2> $R/copy-send.err; echo $? > $R/copy-send.rc
rec copy-receive zfs receive -u -o zfs.csi.dev:managed=true -o mountpoint=legacy tank/csi/pvc-copy < /tmp/stream
rec err-receive-exists zfs receive -u -o zfs.csi.dev:managed=true tank/csi/pvc-copy < /tmp/stream
rec err-receive-empty zfs receive -u tank/csi/pvc-copy2 < /dev/null
rec err-receive-volsize zfs receive -u -o volsize=1 tank/csi/pvc-copy3 < /tmp/stream
rec err-receive-noparent zfs receive -u tank/csi/missing/pvc-copy4 < /tmp/stream
rec err-send-missing zfs send tank/csi/pvc-a@gone
rec list-copy zfs list -H -p -o $L -t filesystem,volume,snapshot -r tank/csi/pvc-copy
echo "$N commands" > $R/done
sync
echo o > /proc/sysrq-trigger
sleep 60
