#!/usr/bin/env bash
# node-ns.sh <statedir>: up.sh runs it as `unshare --mount --propagation private -- node-ns.sh`, in the
# mount namespace that containerd and the kubelet share. In that namespace only, it bind-mounts
#   - <statedir>/sysctl/<name> (holding the host's value) over each /proc/sys entry the kubelet
#     rewrites, so the kubelet's writes land in those files and the host's values stay;
#   - a directory of <statedir>/host over each hard-coded host path listed in <statedir>/host-paths,
#     so nothing is written into the host's directories;
# then execs containerd (same PID). The mounts vanish with the namespace when its last process exits.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "${here}/lib.sh"

S=$1
[[ "$(readlink /proc/self/ns/mnt)" != "$(readlink "/proc/${PPID}/ns/mnt")" ]] || die "node-ns.sh must run in a new mount namespace (unshare --mount)"
for f in "${SYSCTLS[@]}"; do
  name=${f//\//.}
  cat "/proc/sys/${f}" >"${S}/sysctl/${name}"
  mount --bind "${S}/sysctl/${name}" "/proc/sys/${f}"
done
while read -r hostpath src; do
  mount --bind "${src}" "${hostpath}"
done <"${S}/host-paths"
exec containerd --config "${S}/containerd/config.toml"
