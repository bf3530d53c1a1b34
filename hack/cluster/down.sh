#!/usr/bin/env bash
# down.sh <statedir> stops the cluster up.sh started there and removes what up.sh created:
#   1. the kubelet, kube-proxy, kube-scheduler and kube-controller-manager (by PID: SIGTERM, SIGKILL
#      after STOP_TIMEOUT seconds, default 5);
#   2. every process in the cluster's cgroup root (the pods' containers), then containerd, then
#      every process left in containerd's mount namespace (the runc shims): the namespace, and
#      with it every mount containerd, runc and the kubelet made, is gone when its last process is;
#   3. kube-apiserver, then etcd; with POD_NETWORK=1 then the API server's forwarder and the process
#      holding the cluster's network namespace (the namespace, its bridge, addresses, routes and
#      kube-proxy's rules go with its last process);
#   4. the cgroup root in every hierarchy, the host directories listed in created-paths (rmdir,
#      innermost first: a directory that is not empty stays, and down.sh fails), then the state dir.
# It checks that the host sysctls the kubelet rewrites still hold the values up.sh recorded (with
# POD_NETWORK=1 also the host network namespace's addresses, routes, nftables ruleset and network
# sysctls), that no process of the cluster is left and that nothing under the state dir is mounted; it exits
# non-zero when a check fails. A state dir without up.sh's marker file is never touched.
# KEEP_STATE=1 keeps the state dir (logs) after stopping.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "${here}/lib.sh"

[[ $# -eq 1 ]] || die "usage: down.sh <statedir>"
[[ -d "$1" ]] || die "no state dir $1"
S=$(cd "$1" && pwd)
[[ -f "${S}/${MARKER}" ]] || die "${S} was not created by up.sh (no ${MARKER}); not touching it"
[[ $(id -u) -eq 0 ]] || die "must run as root"
STOP_TIMEOUT=${STOP_TIMEOUT:-5}
start_time=$(date +%s.%N)
failed=0

# component <name> prints "<pid>:<start time>" of a started component, nothing when not started.
component() {
  local pid start
  [[ -f "${S}/pids/$1" ]] || return 0
  read -r pid start <"${S}/pids/$1"
  echo "${pid}:${start}"
}

stop_components() {
  local what=$1 n list=()
  shift
  for n in "$@"; do
    e=$(component "${n}")
    [[ -z "${e}" ]] || list+=("${e}")
  done
  ((${#list[@]} == 0)) || stop_pids "${what}" "${STOP_TIMEOUT}" "${list[@]}" || failed=1
}

stop_components "kubelet, kube-proxy, scheduler, controller manager" kubelet kube-proxy kube-scheduler kube-controller-manager

cgroup_root=$(cat "${S}/cgroup-root" 2>/dev/null || true)
if [[ -n "${cgroup_root}" ]]; then
  mapfile -t pods < <(cgroup_pids "${cgroup_root}")
  ((${#pods[@]} == 0)) || stop_pids "containers" "${STOP_TIMEOUT}" "${pods[@]}" || failed=1
fi

stop_components containerd containerd
ns=$(cat "${S}/node-mntns" 2>/dev/null || true)
if [[ -n "${ns}" ]]; then
  mapfile -t rest < <(mntns_pids "${ns}")
  ((${#rest[@]} == 0)) || stop_pids "processes left in the node's mount namespace" "${STOP_TIMEOUT}" "${rest[@]}" || failed=1
fi
if [[ -n "${cgroup_root}" ]]; then
  mapfile -t pods < <(cgroup_pids "${cgroup_root}")
  ((${#pods[@]} == 0)) || stop_pids "containers" "${STOP_TIMEOUT}" "${pods[@]}" || failed=1
fi

stop_components kube-apiserver kube-apiserver
stop_components etcd etcd
stop_components "the API server's forwarder" apiserver-forward
stop_components "the network namespace's holder" netns
netns=$(cat "${S}/node-netns" 2>/dev/null || true)
if [[ -n "${netns}" ]]; then
  mapfile -t rest < <(netns_pids "${netns}")
  ((${#rest[@]} == 0)) || stop_pids "processes left in the cluster's network namespace" "${STOP_TIMEOUT}" "${rest[@]}" || failed=1
fi
t_stopped=$(elapsed "${start_time}")

# Checks and removal of what up.sh created.
if [[ -n "${ns}" && -n "$(mntns_pids "${ns}")" ]]; then
  log "processes are left in the node's mount namespace ${ns}: $(mntns_pids "${ns}" | tr '\n' ' ')"
  failed=1
fi
for f in "${S}"/pids/*; do
  [[ -f "${f}" ]] || continue
  read -r pid start <"${f}"
  if proc_alive "${pid}" "${start}"; then
    log "$(basename "${f}") (pid ${pid}) is still running"
    failed=1
  fi
done
if [[ -n "${cgroup_root}" ]]; then
  remove_cgroup_root "${cgroup_root}" || failed=1
fi
if [[ -f "${S}/created-paths" ]]; then
  while read -r p; do
    [[ -n "${p}" && -d "${p}" ]] || continue
    rmdir "${p}" || {
      log "left ${p} (created by up.sh, not empty now)"
      failed=1
    }
  done < <(tac "${S}/created-paths")
fi
if [[ -n "${netns}" && -n "$(netns_pids "${netns}")" ]]; then
  log "processes are left in the cluster's network namespace ${netns}: $(netns_pids "${netns}" | tr '\n' ' ')"
  failed=1
fi
if [[ -f "${S}/host-network.before" ]]; then
  if ! diff "${S}/host-network.before" <(record_host_network) >"${S}/host-network.diff"; then
    log "the host's network namespace changed (addresses, routes, nftables ruleset or sysctls): $(tr '\n' ' ' <"${S}/host-network.diff")"
    failed=1
  fi
fi
if [[ -f "${S}/sysctl.before" ]]; then
  if ! diff <(record_sysctls) "${S}/sysctl.before" >/dev/null; then
    log "host sysctls changed: $(diff <(record_sysctls) "${S}/sysctl.before" | tr '\n' ' ')"
    failed=1
  fi
fi
if awk -v s="${S}/" '{ if (index($5 "/", s) == 1) { found = 1 } } END { exit !found }' /proc/self/mountinfo; then
  log "something under ${S} is still mounted; not removing it"
  failed=1
elif [[ "${KEEP_STATE:-0}" != 1 ]]; then
  if ((failed)); then
    log "keeping ${S} (logs) since a step failed"
  else
    rm -rf --one-file-system "${S}"
  fi
fi
log "down in $(elapsed "${start_time}")s (processes stopped in ${t_stopped}s)$( ((failed)) && echo '; with errors above')"
exit "${failed}"
