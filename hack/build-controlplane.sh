#!/usr/bin/env bash
# build-controlplane.sh builds the envtest control plane (etcd, kube-apiserver, kubectl) from Go
# modules into bin/k8s/<version>-<os>-<arch>/, the layout setup-envtest would produce.
#
# setup-envtest downloads prebuilt binaries, which this project's machines cannot reach; every
# byte here comes from the Go module proxy instead. The tools live in modules of their own
# (hack/controlplane/kube, hack/controlplane/etcd) so the operator's go.mod stays small.
#
# CLUSTER=1 also builds kubelet, kube-controller-manager, kube-scheduler and kube-proxy (same module, same
# flags) for the real single-node cluster of hack/cluster (make test-cluster; kube-proxy for its
# POD_NETWORK=1 mode); the default builds
# only what envtest needs, so make test does not pay for them.
#
# Idempotent: when every wanted binary exists it prints their path and exits. Concurrent runs
# serialize on a lock in the assets directory (flock), so a binary is never built twice at once.
# Prints the assets directory (for KUBEBUILDER_ASSETS) as its last line on stdout.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.0}
root=$(cd "$(dirname "$0")/.." && pwd)
os=$(go env GOOS)
arch=$(go env GOARCH)
assets="${root}/bin/k8s/${KUBE_VERSION#v}-${os}-${arch}"

log() { echo "build-controlplane: $*" >&2; }

kube_cmds=(kube-apiserver kubectl)
if [[ "${CLUSTER:-0}" == 1 ]]; then
  kube_cmds+=(kube-scheduler kube-controller-manager kubelet kube-proxy)
fi

all_present() {
  local cmd
  for cmd in etcd "${kube_cmds[@]}"; do
    [[ -x "${assets}/${cmd}" ]] || return 1
  done
}

if all_present; then
  log "present: ${assets} (kube ${KUBE_VERSION}, etcd ${ETCD_VERSION}: etcd ${kube_cmds[*]}); skipping build"
  echo "${assets}"
  exit 0
fi

mkdir -p "${assets}"
exec 9>"${assets}/.build.lock"
if ! flock -n 9; then
  log "another build holds ${assets}/.build.lock; waiting for it ..."
  flock 9
fi
tmp=$(mktemp -d "${assets}/.tmp.XXXXXX")
trap 'rm -rf "${tmp}"' EXIT

major=$(echo "${KUBE_VERSION#v}" | cut -d. -f1)
minor=$(echo "${KUBE_VERSION#v}" | cut -d. -f2)
kver="-X k8s.io/component-base/version.gitVersion=${KUBE_VERSION}"
kver+=" -X k8s.io/component-base/version.gitMajor=${major} -X k8s.io/component-base/version.gitMinor=${minor}"
kver+=" -X k8s.io/component-base/version.gitTreeState=clean"
kver+=" -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION}"
kver+=" -X k8s.io/client-go/pkg/version.gitMajor=${major} -X k8s.io/client-go/pkg/version.gitMinor=${minor}"

start=$(date +%s)
export CGO_ENABLED=0 GOFLAGS=-mod=mod
if [[ ! -x "${assets}/etcd" ]]; then
  log "building etcd ${ETCD_VERSION} (go.etcd.io/etcd/server/v3) ..."
  (cd "${root}/hack/controlplane/etcd" && go build -trimpath -ldflags "-s -w" -o "${tmp}/etcd" .)
  mv "${tmp}/etcd" "${assets}/etcd"
fi
for cmd in "${kube_cmds[@]}"; do
  if [[ ! -x "${assets}/${cmd}" ]]; then
    log "building ${cmd} ${KUBE_VERSION} (k8s.io/kubernetes, staging modules at v0.${minor}.${KUBE_VERSION##*.}) ..."
    t0=$(date +%s)
    (cd "${root}/hack/controlplane/kube" && go build -trimpath -ldflags "-s -w ${kver}" -o "${tmp}/${cmd}" "k8s.io/kubernetes/cmd/${cmd}")
    mv "${tmp}/${cmd}" "${assets}/${cmd}"
    log "built ${cmd} in $(( $(date +%s) - t0 ))s"
  fi
done
log "built in $(( $(date +%s) - start ))s: ${assets}"
echo "${assets}"
