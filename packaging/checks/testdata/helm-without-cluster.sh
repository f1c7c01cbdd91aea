#!/usr/bin/env bash
# helm for the tests that run the documents' helm install commands as they
# are written, where there is no cluster: helm install NAME CHART [flags]
# renders what it would apply, as helm template of the same arguments
# through HELMTOOL (packaging/checks/helmtool), less the flags that only act
# on a cluster (--create-namespace, --take-ownership), plus HELM_CLUSTER_ARGS:
# what helm install would learn from the cluster (--api-versions ...).
set -euo pipefail
[[ ${1:-} == install ]] || { echo "helm-without-cluster.sh: only helm install is known, not: $*" >&2; exit 2; }
shift
args=()
for arg in "$@"; do
	case $arg in
	--create-namespace | --take-ownership) ;;
	*) args+=("$arg") ;;
	esac
done
# shellcheck disable=SC2086 # HELM_CLUSTER_ARGS is a list of words
exec "${HELMTOOL:?}" template "${args[@]}" ${HELM_CLUSTER_ARGS:-}
