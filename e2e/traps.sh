# shellcheck shell=bash
# Sourced by the host-side scripts that clean up on exit: at_exit is how each
# sets its EXIT trap.

# at_exit CMD sets the EXIT trap to run CMD (a string, as trap takes it) with
# INT, TERM and HUP ignored. An interrupted make signals its whole process
# group, then sends its child a TERM of its own, which arrives while the trap
# runs: under set -e it ended the trap half-way, and a run's cleanup left an
# apiserver that had ignored the first TERM holding port 6443 (cp_stop never
# reached its KILL).
#
# INT, TERM and HUP themselves become a plain exit: left to bash's default,
# it ran the EXIT trap from inside its signal handler, with SIGCHLD blocked,
# and there a wait for a job that had already ended (seen once, after a TERM
# to make e2e-k8s's group) blocked for good in wait4 on the one child left,
# the apiserver that the trap was still to kill.
at_exit() {
	# $1 goes into the trap's text now; what it names expands when it runs.
	# shellcheck disable=SC2064
	trap "trap '' INT TERM HUP; $1" EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	trap 'exit 129' HUP
}
