#!/usr/bin/env bash
# up.sh <statedir> starts a real single-node Kubernetes cluster on this machine, on 127.0.0.1 only (with
# POD_NETWORK=1: in a network namespace of its own, with a pod network and kube-proxy; see below):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd and the kubelet, each a
# process whose PID is kept in <statedir>/pids/. down.sh <statedir> stops them and removes
# everything up.sh created. The state directory must not exist or be empty; up.sh creates it and
# everything of the cluster lives in it (PKI, etcd data, containerd root and state, kubelet root,
# logs), except what the programs hard-code (see "Host paths" below).
#
# On success it writes <statedir>/admin.kubeconfig (cluster-admin, a client certificate) and
# <statedir>/cluster.env (KEY=value lines: APISERVER_URL, APISERVER_PORT, KUBECONFIG, NODE_NAME,
# PAUSE_IMAGE, CONTAINERD_ADDRESS, CGROUP_ROOT, <COMPONENT>_PID ...) and prints the path of
# cluster.env as its last line on stdout. Logs of every component are in <statedir>/logs/. On
# failure it prints the tail of each log to stderr, runs down.sh (unless KEEP_ON_FAILURE=1) and
# exits non-zero.
#
# `up.sh --check` only checks the prerequisites (exit 0 when all are there). What it needs: root; containerd 1.6+, runc and the CNI plugins (Debian: apt-get install -y
# containerd runc containernetworking-plugins); openssl, unshare, nsenter, ss; the Kubernetes
# binaries of hack/build-controlplane.sh (CLUSTER=1, built here when missing); the pause image of
# hack/cluster/pause-image.sh (built here when missing).
#
# How it stays on this machine and leaves the host as it was (without POD_NETWORK=1):
#   - every listener binds 127.0.0.1, on free ports picked at start; the node is named 127.0.0.1
#     (--hostname-override), so its InternalIP is 127.0.0.1; pods must use hostNetwork: there is
#     no pod network (a CNI conflist with only the loopback plugin makes the node Ready);
#   - the Service range is 127.0.100.0/24: a client that follows the kubernetes Service's
#     ClusterIP stays on loopback (nothing listens there: set KUBERNETES_SERVICE_HOST=127.0.0.1 and
#     KUBERNETES_SERVICE_PORT=<APISERVER_PORT> in pods that talk to the API server);
#   - containerd runs with HTTP_PROXY and HTTPS_PROXY=http://127.0.0.1:9, a closed port: an image
#     pull, from any registry, fails with "proxyconnect tcp: dial tcp 127.0.0.1:9: connection
#     refused" without resolving the registry's name (images are imported, never pulled);
#   - containerd and the kubelet run in their own mount namespace (unshare --mount, private
#     propagation): there, files holding the host's values are bind-mounted over the six
#     /proc/sys entries the kubelet rewrites, so no host sysctl changes, and every mount they make
#     vanishes with the namespace when their last process exits;
#   - host paths the programs hard-code (/var/lib/kubelet, /var/log/containers, /run/containerd,
#     /var/lib/cni)
#     get a directory of the state dir bind-mounted over them in that namespace,
#     so nothing is written into them; those that did not exist are created and recorded in
#     <statedir>/created-paths, and down.sh removes exactly those (rmdir: only when empty);
#   - pods' cgroups live under a cgroup root of their own (/actionledger-<statedir name>, created
#     in every cgroup v1 hierarchy and removed by down.sh).
#
# POD_NETWORK=1: a cluster with a pod network, as most users run one, that still leaves the host as it was.
# Everything networked of the cluster lives in a network namespace of its own, unnamed, held by a process
# (`unshare --net -- sleep infinity`, component "netns"): etcd, kube-apiserver, KCM, scheduler, containerd, the
# kubelet and kube-proxy run in it (nsenter --net); when down.sh has stopped them and the holder, the namespace and
# everything in it are gone. In it:
#   - the node's address 10.250.0.1/32 on the namespace's lo (this kernel has no dummy driver; lo is always up):
#     the node is named 10.250.0.1 (--hostname-override, --node-ip), the API server binds and advertises it, so
#     its endpoint reconciler gives the kubernetes Service (10.96.0.1, Service range 10.96.0.0/24) its endpoint
#     10.250.0.1:6443; the components use the usual ports (6443, 2379, 10250, ...), nobody else's there;
#   - the pods' bridge cni0 with 10.244.0.1/24 (created here; the bridge plugin with host-local addresses of
#     10.244.0.0/24 attaches each pod's veth to it, no ipMasq), a route of the Service range via cni0 (so the
#     namespace's own processes can open connections to ClusterIPs), net.ipv4.ip_forward=1;
#   - kube-proxy (built from Go modules by CLUSTER=1 hack/build-controlplane.sh) in iptables mode (iptables-nft),
#     its rules and the sysctls it sets (route_localnet) in the namespace only; conntrack maxPerCore 0 / min 0 and
#     the timeouts 0, so it writes none of the nf_conntrack sysctls. Bridged pod-to-pod Service traffic goes through
#     iptables because bridge-nf-call-iptables is 1 in the namespace (br_netfilter is built into this kernel and
#     per namespace; up.sh checks, never writes it);
#   - the namespace has no interface but lo, cni0 and the pods' veths: nothing in it can reach the host or another
#     machine. Pods get no name server (kubelet resolvConf ""): the cluster runs no DNS, use ClusterIPs.
# The host reaches the API server through test/cmd/netns-forward (component "apiserver-forward", built into
# bin/cluster here): it listens on the host's 127.0.0.1:<free port> (APISERVER_PORT of cluster.env, the
# admin.kubeconfig's server) and dials 10.250.0.1:6443 from a thread that joined the namespace (setns), so
# kubectl, helm and client-go on the host work as with the loopback cluster. To reach ClusterIPs and pod
# addresses, run a command in the namespace: `nsenter --net=$NETNS curl ...` (NETNS of cluster.env). up.sh records
# the host network namespace's addresses, routes, nftables ruleset and network sysctls (host-network.before);
# down.sh fails if they changed. The mount namespace, cgroup root and host paths are as without a pod network.
#
# Knobs (environment): POD_NETWORK (above, default 0), KUBE_ASSETS (default bin/k8s/<ver>-linux-amd64), PAUSE_IMAGE_TAR (default:
# built by pause-image.sh), READY_TIMEOUT (seconds, default 120), LOG_V (kubelet/KCM verbosity),
# MAX_REQUESTS_INFLIGHT and MAX_MUTATING_REQUESTS_INFLIGHT (the API server's
# --max-requests-inflight and --max-mutating-requests-inflight, default 400 and 200 as upstream: their
# sum is the concurrency that API Priority and Fairness divides among its priority levels).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "${here}/../.." && pwd)
# shellcheck source=lib.sh
source "${here}/lib.sh"

[[ $# -eq 1 ]] || die "usage: up.sh <statedir> | up.sh --check"
check_prerequisites
[[ $(id -u) -eq 0 ]] || die "must run as root (containerd, the kubelet, mount namespaces and cgroups need it); run with sudo"
if [[ "$1" == --check ]]; then
  exit 0
fi
S=$1

if [[ -e "${S}" ]] && [[ -n "$(ls -A "${S}")" ]]; then
  die "state dir ${S} exists and is not empty; give a new or empty directory"
fi
mkdir -p "${S}"
S=$(cd "${S}" && pwd)
if ((${#S} > 60)); then
  die "state dir path ${S} is too long for unix socket paths (keep it under 60 characters)"
fi
touch "${S}/${MARKER}"
mkdir -p "${S}"/{pids,logs,pki,etcd,kubelet,kubelet-pki,pod-logs,kubelet-volume-plugins,kcm-flex,kcm-certs,cni/net.d,sysctl,host}
mkdir -p "${S}/containerd"/{root,state,runc,opt,certs.d}
start_time=$(date +%s.%N)

READY_TIMEOUT=${READY_TIMEOUT:-120}
LOG_V=${LOG_V:-1}
NODE_NAME=127.0.0.1
POD_NETWORK=${POD_NETWORK:-0}
# in_netns runs a command in the cluster's network namespace (POD_NETWORK=1); without a pod network, as it is.
in_netns=()
if [[ "${POD_NETWORK}" == 1 ]]; then
  NODE_IP=10.250.0.1
  NODE_NAME=${NODE_IP}
  POD_CIDR=10.244.0.0/24
  POD_GATEWAY=10.244.0.1
  SERVICE_CIDR=10.96.0.0/24
  KUBERNETES_SERVICE_IP=10.96.0.1
fi

on_exit() {
  local rc=$?
  trap - EXIT
  ((rc != 0)) || return 0
  log "failed (exit ${rc}); logs under ${S}/logs:"
  print_log_tails "${S}" >&2
  if [[ "${KEEP_ON_FAILURE:-0}" != 1 ]]; then
    "${here}/down.sh" "${S}" >&2 || true
  else
    log "KEEP_ON_FAILURE=1: leaving the cluster as it is; stop it with ${here}/down.sh ${S}"
  fi
  exit "${rc}"
}
trap on_exit EXIT

# --- binaries and images -------------------------------------------------------------------
assets=${KUBE_ASSETS:-$(CLUSTER=1 "${root}/hack/build-controlplane.sh")}
if [[ "${POD_NETWORK}" == 1 ]] && [[ ! -x "${assets}/kube-proxy" ]]; then
  # A KUBE_ASSETS built before kube-proxy was part of CLUSTER=1: add it (skipped when present).
  CLUSTER=1 "${root}/hack/build-controlplane.sh" >/dev/null
fi
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl $([[ "${POD_NETWORK}" == 1 ]] && echo kube-proxy); do
  [[ -x "${assets}/${b}" ]] || die "${assets}/${b} is missing; run CLUSTER=1 hack/build-controlplane.sh"
done
pause_tar=${PAUSE_IMAGE_TAR:-$("${here}/pause-image.sh")}
[[ -f "${pause_tar}" ]] || die "pause image ${pause_tar} is missing"
kubectl=("${assets}/kubectl" --kubeconfig "${S}/admin.kubeconfig" --cache-dir "${S}/kubectl-cache")

# --- record the host as it is --------------------------------------------------------------
record_sysctls >"${S}/sysctl.before"
cgroup_root="/actionledger-$(basename "${S}" | tr -c 'A-Za-z0-9_.\n-' '-')"
echo "${cgroup_root}" >"${S}/cgroup-root"
create_cgroup_root "${cgroup_root}"
: >"${S}/created-paths"
: >"${S}/host-paths"
i=0
for p in "${HARDCODED_HOST_PATHS[@]}"; do
  mkdir_recorded "${p}" "${S}/created-paths"
  mkdir -p "${S}/host/${i}"
  echo "${p} ${S}/host/${i}" >>"${S}/host-paths"
  i=$((i + 1))
done

# --- ports ---------------------------------------------------------------------------------
if [[ "${POD_NETWORK}" == 1 ]]; then
  # The namespace is the cluster's own: the usual ports, taken by nobody else. Only the forwarder to the API
  # server listens on the host (127.0.0.1, a free port).
  ETCD_PORT=2379 ETCD_PEER_PORT=2380 APISERVER_PORT=6443 KCM_PORT=10257 SCHEDULER_PORT=10259
  KUBELET_PORT=10250 KUBELET_HEALTHZ_PORT=10248
  APISERVER_HOST_PORT=$(free_port)
  APISERVER_URL="https://127.0.0.1:${APISERVER_HOST_PORT}" # the admin's, on the host, through the forwarder
  INTERNAL_URL="https://${NODE_IP}:${APISERVER_PORT}"        # the components', in the namespace
  LISTEN_IP=${NODE_IP}
else
  ETCD_PORT=$(free_port)
  ETCD_PEER_PORT=$(free_port "${ETCD_PORT}")
  APISERVER_PORT=$(free_port "${ETCD_PORT}" "${ETCD_PEER_PORT}")
  KCM_PORT=$(free_port "${ETCD_PORT}" "${ETCD_PEER_PORT}" "${APISERVER_PORT}")
  SCHEDULER_PORT=$(free_port "${ETCD_PORT}" "${ETCD_PEER_PORT}" "${APISERVER_PORT}" "${KCM_PORT}")
  KUBELET_PORT=$(free_port "${ETCD_PORT}" "${ETCD_PEER_PORT}" "${APISERVER_PORT}" "${KCM_PORT}" "${SCHEDULER_PORT}")
  KUBELET_HEALTHZ_PORT=$(free_port "${ETCD_PORT}" "${ETCD_PEER_PORT}" "${APISERVER_PORT}" "${KCM_PORT}" "${SCHEDULER_PORT}" "${KUBELET_PORT}")
  APISERVER_HOST_PORT=${APISERVER_PORT}
  APISERVER_URL="https://127.0.0.1:${APISERVER_PORT}"
  INTERNAL_URL=${APISERVER_URL}
  LISTEN_IP=127.0.0.1
fi

# --- the network namespace (POD_NETWORK=1) --------------------------------------------------
if [[ "${POD_NETWORK}" == 1 ]]; then
  record_host_network >"${S}/host-network.before"
  # An unnamed namespace, held by a process of its own (the first to start, the last down.sh stops).
  start_component "${S}" netns unshare --net -- sleep infinity
  netns_pid=$(cut -d" " -f1 "${S}/pids/netns")
  netns_created() { [[ "$(readlink "/proc/${netns_pid}/ns/net")" != "$(readlink /proc/self/ns/net)" ]]; }
  wait_for "the network namespace" 10 netns_created
  readlink "/proc/${netns_pid}/ns/net" >"${S}/node-netns"
  in_netns=(nsenter --net="/proc/${netns_pid}/ns/net" --)
  # The node's address on the namespace's lo (no dummy driver on this kernel; lo is always up), the pods' bridge
  # with their gateway address, and a route for the Service range (kube-proxy rewrites the destination in
  # OUTPUT and PREROUTING; the route only lets a packet to a ClusterIP leave the namespace's own processes).
  "${in_netns[@]}" sh -ec "
    ip link set lo up
    ip addr add ${NODE_IP}/32 dev lo
    ip link add cni0 type bridge
    ip addr add ${POD_GATEWAY}/${POD_CIDR#*/} dev cni0
    ip link set cni0 up
    ip route add ${SERVICE_CIDR} dev cni0 src ${NODE_IP}
    echo 1 >/proc/sys/net/ipv4/ip_forward
  " || die "setting up the cluster's network namespace"
  # A pod's packet to a ClusterIP whose endpoint is on the same bridge needs the bridge to pass it to iptables
  # (br_netfilter, per namespace on this kernel): kube-proxy expects it, as on every node.
  bnf=$("${in_netns[@]}" cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo missing)
  [[ "${bnf}" == 1 ]] || die "net.bridge.bridge-nf-call-iptables is ${bnf} in the cluster's network namespace (br_netfilter); kube-proxy needs 1"
  forwarder="${root}/bin/cluster/netns-forward"
  if [[ ! -x "${forwarder}" ]] || [[ -n "$(find "${root}/test/cmd/netns-forward" -newer "${forwarder}" -print -quit)" ]]; then
    mkdir -p "${root}/bin/cluster"
    CGO_ENABLED=0 go build -C "${root}" -trimpath -o "${forwarder}" ./test/cmd/netns-forward
  fi
  start_component "${S}" apiserver-forward "${forwarder}" --listen "127.0.0.1:${APISERVER_HOST_PORT}" \
    --netns "/proc/${netns_pid}/ns/net" --to "${NODE_IP}:${APISERVER_PORT}"
fi

# --- PKI -----------------------------------------------------------------------------------
if [[ "${POD_NETWORK}" == 1 ]]; then
  make_pki "${S}/pki" "${NODE_NAME}" "IP:${NODE_IP},IP:${KUBERNETES_SERVICE_IP}"
else
  make_pki "${S}/pki" "${NODE_NAME}"
fi
write_kubeconfig "${S}/admin.kubeconfig" "${APISERVER_URL}" "${S}/pki" admin
write_kubeconfig "${S}/kubelet.kubeconfig" "${INTERNAL_URL}" "${S}/pki" kubelet
write_kubeconfig "${S}/kcm.kubeconfig" "${INTERNAL_URL}" "${S}/pki" kube-controller-manager
write_kubeconfig "${S}/scheduler.kubeconfig" "${INTERNAL_URL}" "${S}/pki" kube-scheduler
[[ "${POD_NETWORK}" != 1 ]] || write_kubeconfig "${S}/kube-proxy.kubeconfig" "${INTERNAL_URL}" "${S}/pki" kube-proxy

# --- etcd and the API server ---------------------------------------------------------------
start_component "${S}" etcd "${in_netns[@]}" "${assets}/etcd" \
  --name=default --data-dir="${S}/etcd" \
  --listen-client-urls="http://127.0.0.1:${ETCD_PORT}" --advertise-client-urls="http://127.0.0.1:${ETCD_PORT}" \
  --listen-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" --initial-advertise-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
  --initial-cluster="default=http://127.0.0.1:${ETCD_PEER_PORT}" --unsafe-no-fsync=true

if [[ "${POD_NETWORK}" == 1 ]]; then
  # The node's address: the endpoint reconciler gives the kubernetes Service its endpoint.
  apiserver_net=(--service-cluster-ip-range="${SERVICE_CIDR}")
else
  # 127.0.0.1 cannot be a Service endpoint: no reconciler, and no endpoints.
  apiserver_net=(--endpoint-reconciler-type=none --service-cluster-ip-range=127.0.100.0/24)
fi
start_component "${S}" kube-apiserver "${in_netns[@]}" "${assets}/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:${ETCD_PORT}" \
  --bind-address="${LISTEN_IP}" --advertise-address="${LISTEN_IP}" --secure-port="${APISERVER_PORT}" \
  "${apiserver_net[@]}" \
  --tls-cert-file="${S}/pki/apiserver.crt" --tls-private-key-file="${S}/pki/apiserver.key" \
  --client-ca-file="${S}/pki/ca.crt" \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --service-account-issuer="${INTERNAL_URL}" \
  --service-account-key-file="${S}/pki/sa.pub" --service-account-signing-key-file="${S}/pki/sa.key" \
  --kubelet-client-certificate="${S}/pki/apiserver-kubelet-client.crt" \
  --kubelet-client-key="${S}/pki/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="${S}/pki/ca.crt" \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --max-requests-inflight="${MAX_REQUESTS_INFLIGHT:-400}" \
  --max-mutating-requests-inflight="${MAX_MUTATING_REQUESTS_INFLIGHT:-200}" \
  --profiling=false

wait_for "the API server to be ready" 60 "${kubectl[@]}" get --raw /readyz
t_apiserver=$(elapsed "${start_time}")
# The API server's client certificate for kubelets (logs, exec, port-forward): what kubeadm grants.
"${kubectl[@]}" create clusterrolebinding actionledger:kube-apiserver-kubelet-client \
  --clusterrole=system:kubelet-api-admin --user=kube-apiserver-kubelet-client >/dev/null

# --- controller manager and scheduler ------------------------------------------------------
start_component "${S}" kube-controller-manager "${in_netns[@]}" "${assets}/kube-controller-manager" \
  --kubeconfig="${S}/kcm.kubeconfig" \
  --authentication-kubeconfig="${S}/kcm.kubeconfig" --authorization-kubeconfig="${S}/kcm.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="${KCM_PORT}" --cert-dir="${S}/kcm-certs" \
  --controllers='*' --use-service-account-credentials \
  --root-ca-file="${S}/pki/ca.crt" --service-account-private-key-file="${S}/pki/sa.key" \
  --cluster-signing-cert-file="${S}/pki/ca.crt" --cluster-signing-key-file="${S}/pki/ca.key" \
  --flex-volume-plugin-dir="${S}/kcm-flex" \
  --leader-elect=false --profiling=false --v="${LOG_V}"

start_component "${S}" kube-scheduler "${in_netns[@]}" "${assets}/kube-scheduler" \
  --kubeconfig="${S}/scheduler.kubeconfig" \
  --authentication-kubeconfig="${S}/scheduler.kubeconfig" --authorization-kubeconfig="${S}/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="${SCHEDULER_PORT}" \
  --leader-elect=false --profiling=false

# --- containerd in the node's mount namespace ----------------------------------------------
PAUSE_IMAGE=${PAUSE_IMAGE_NAME}
write_containerd_config "${S}" "${PAUSE_IMAGE}"
if [[ "${POD_NETWORK}" == 1 ]]; then
  mkdir -p "${S}/cni/ipam"
  write_cni_bridge_conflist "${S}/cni/net.d" "${POD_CIDR}" "${S}"
else
  write_cni_conflist "${S}/cni/net.d"
fi
# The namespace's init is containerd: node-ns.sh bind-mounts, then execs it (same PID).
start_component "${S}" containerd "${in_netns[@]}" unshare --mount --propagation private -- \
  env HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY=127.0.0.1,localhost \
  "${here}/node-ns.sh" "${S}"
containerd_pid=$(cut -d" " -f1 "${S}/pids/containerd")
wait_for "containerd to serve" 30 ctr --address "${S}/containerd/containerd.sock" version
readlink "/proc/${containerd_pid}/ns/mnt" >"${S}/node-mntns"
[[ "$(cat "${S}/node-mntns")" != "$(readlink /proc/self/ns/mnt)" ]] || die "containerd is not in a mount namespace of its own"
ctr --address "${S}/containerd/containerd.sock" -n k8s.io images import "${pause_tar}" >"${S}/logs/image-import.log" 2>&1
grep -q "${PAUSE_IMAGE}" <(ctr --address "${S}/containerd/containerd.sock" -n k8s.io images ls -q) ||
  die "the pause image ${PAUSE_IMAGE} is not in containerd after the import (${pause_tar})"

# --- the kubelet, in containerd's mount namespace ------------------------------------------
if [[ "${POD_NETWORK}" == 1 ]]; then
  # resolvConf "": pods get no name server (the cluster runs no DNS; the host's must not be asked).
  write_kubelet_config "${S}" "${KUBELET_PORT}" "${KUBELET_HEALTHZ_PORT}" "${cgroup_root}" "${NODE_IP}" 'resolvConf: ""'
  start_component "${S}" kubelet nsenter --target "${containerd_pid}" --mount --net -- \
    "${assets}/kubelet" --config="${S}/kubelet-config.yaml" --kubeconfig="${S}/kubelet.kubeconfig" \
    --root-dir="${S}/kubelet" --cert-dir="${S}/kubelet-pki" --hostname-override="${NODE_NAME}" \
    --node-ip="${NODE_IP}" --v="${LOG_V}"
  write_kube_proxy_config "${S}" "${NODE_NAME}" "${POD_CIDR}"
  start_component "${S}" kube-proxy "${in_netns[@]}" "${assets}/kube-proxy" --config="${S}/kube-proxy-config.yaml" --v="${LOG_V}"
else
  write_kubelet_config "${S}" "${KUBELET_PORT}" "${KUBELET_HEALTHZ_PORT}" "${cgroup_root}"
  start_component "${S}" kubelet nsenter --target "${containerd_pid}" --mount -- \
    "${assets}/kubelet" --config="${S}/kubelet-config.yaml" --kubeconfig="${S}/kubelet.kubeconfig" \
    --root-dir="${S}/kubelet" --cert-dir="${S}/kubelet-pki" --hostname-override="${NODE_NAME}" --v="${LOG_V}"
fi

wait_for "node ${NODE_NAME} to register" "${READY_TIMEOUT}" "${kubectl[@]}" get node "${NODE_NAME}"
t_registered=$(elapsed "${start_time}")
wait_for "node ${NODE_NAME} to be Ready" "${READY_TIMEOUT}" \
  "${kubectl[@]}" wait --for=condition=Ready "node/${NODE_NAME}" --timeout=5s
t_ready=$(elapsed "${start_time}")
wait_for "the default ServiceAccount" "${READY_TIMEOUT}" "${kubectl[@]}" -n default get serviceaccount default
wait_for "the kube-root-ca.crt ConfigMap" "${READY_TIMEOUT}" "${kubectl[@]}" -n default get configmap kube-root-ca.crt
if [[ "${POD_NETWORK}" == 1 ]]; then
  kubernetes_endpoint() {
    [[ "$("${kubectl[@]}" -n default get endpointslice kubernetes -o jsonpath='{.endpoints[*].addresses[*]}')" == "${NODE_IP}" ]]
  }
  kube_proxy_synced() { "${in_netns[@]}" iptables-save -t nat | grep -q 'default/kubernetes:https'; }
  wait_for "the kubernetes Service's endpoint ${NODE_IP}" "${READY_TIMEOUT}" kubernetes_endpoint
  wait_for "kube-proxy's rules for the kubernetes Service" "${READY_TIMEOUT}" kube_proxy_synced
fi
t_total=$(elapsed "${start_time}")

{
  echo "STATE_DIR=${S}"
  echo "APISERVER_URL=${APISERVER_URL}"
  echo "APISERVER_HOST=127.0.0.1"
  echo "APISERVER_PORT=${APISERVER_HOST_PORT}"
  echo "KUBECONFIG=${S}/admin.kubeconfig"
  echo "NODE_NAME=${NODE_NAME}"
  echo "PAUSE_IMAGE=${PAUSE_IMAGE}"
  echo "CONTAINERD_ADDRESS=${S}/containerd/containerd.sock"
  echo "CGROUP_ROOT=${cgroup_root}"
  echo "KUBE_ASSETS=${assets}"
  echo "ETCD_URL=http://127.0.0.1:${ETCD_PORT}"
  echo "KUBELET_PORT=${KUBELET_PORT}"
  if [[ "${POD_NETWORK}" == 1 ]]; then
    echo "POD_NETWORK=1"
    echo "NETNS=/proc/${netns_pid}/ns/net"
    echo "NODE_IP=${NODE_IP}"
    echo "POD_CIDR=${POD_CIDR}"
    echo "SERVICE_CIDR=${SERVICE_CIDR}"
    echo "INTERNAL_APISERVER_URL=${INTERNAL_URL}"
  fi
  for f in "${S}"/pids/*; do
    n=$(basename "${f}" | tr 'a-z-' 'A-Z_')
    echo "${n}_PID=$(cut -d' ' -f1 "${f}")"
  done
  echo "START_SECONDS=${t_total}"
} >"${S}/cluster.env"
log "up in ${t_total}s (API server ready ${t_apiserver}s, node registered ${t_registered}s, Ready ${t_ready}s); API server ${APISERVER_URL}; kubeconfig ${S}/admin.kubeconfig"
trap - EXIT
echo "${S}/cluster.env"
