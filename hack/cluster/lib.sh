# lib.sh: functions shared by up.sh and down.sh (sourced, not run). See up.sh for the design.
# shellcheck shell=bash
# shellcheck disable=SC2034 # the constants below are used by the scripts that source this file

# MARKER is the file up.sh puts into a state dir it created; down.sh removes only such a dir.
MARKER=.actionledger-cluster
# PAUSE_IMAGE_NAME is the sandbox image, built by pause-image.sh from test/cmd/pause.
PAUSE_IMAGE_NAME=localhost/actionledger/pause:1.0
# HARDCODED_HOST_PATHS are directories containerd 1.6, its shims, the CNI library and the kubelet use
# whatever their flags say (/var/lib/kubelet/device-plugins, the container log links,
# /run/containerd/{s,fifo,runc}, libcni's result cache /var/lib/cni/results).
HARDCODED_HOST_PATHS=(/var/lib/kubelet /var/log/containers /run/containerd /var/lib/cni)
# SYSCTLS are the /proc/sys entries the kubelet rewrites (setupKernelTunables in
# pkg/kubelet/cm/container_manager_linux.go); node-ns.sh hides them behind files.
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
APT_HINT="apt-get install -y containerd runc containernetworking-plugins"
CNI_BIN_DIR=${CNI_BIN_DIR:-/usr/lib/cni}

log() { echo "cluster: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# check_prerequisites fails with the apt-get command when containerd, runc or the CNI plugins
# are missing, and names any other missing tool.
check_prerequisites() {
  local missing=() b
  for b in containerd containerd-shim-runc-v2 ctr runc; do
    command -v "${b}" >/dev/null 2>&1 || missing+=("${b}")
  done
  [[ -x "${CNI_BIN_DIR}/loopback" ]] || missing+=("the CNI plugins (${CNI_BIN_DIR}/loopback)")
  if ((${#missing[@]} > 0)); then
    die "missing ${missing[*]}; install them with: ${APT_HINT}"
  fi
  for b in openssl unshare nsenter setsid ss awk; do
    command -v "${b}" >/dev/null 2>&1 || die "missing ${b} (Debian packages: openssl, util-linux, iproute2, gawk)"
  done
  if [[ "${POD_NETWORK:-0}" == 1 ]]; then
    for b in ip iptables-save iptables-restore nft curl; do
      command -v "${b}" >/dev/null 2>&1 || die "missing ${b} for POD_NETWORK=1 (Debian packages: iproute2, iptables, nftables, curl)"
    done
    for b in bridge host-local; do
      [[ -x "${CNI_BIN_DIR}/${b}" ]] || die "missing the CNI plugin ${CNI_BIN_DIR}/${b}; install it with: ${APT_HINT}"
    done
  fi
}

# record_sysctls prints "name value" for every entry of SYSCTLS, as the host has them now.
record_sysctls() {
  local f
  for f in "${SYSCTLS[@]}"; do
    echo "${f} $(cat "/proc/sys/${f}")"
  done
}

# cgroup_hierarchies prints the mount point of every cgroup (v1) and cgroup2 hierarchy.
cgroup_hierarchies() {
  awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup" || $(i+1) == "cgroup2") print $5; break } }' \
    /proc/self/mountinfo
}

# create_cgroup_root <name> creates the cgroup <name> (e.g. /actionledger-x) in every hierarchy;
# it fails when it exists already. The cpuset of a new v1 cgroup is empty: copy the parent's.
create_cgroup_root() {
  local name=$1 h
  while read -r h; do
    mkdir "${h}${name}"
    if [[ -f "${h}/cpuset.cpus" && -f "${h}${name}/cpuset.cpus" ]]; then
      cat "${h}/cpuset.cpus" >"${h}${name}/cpuset.cpus"
      cat "${h}/cpuset.mems" >"${h}${name}/cpuset.mems"
    fi
  done < <(cgroup_hierarchies)
}

# cgroup_pids <name> prints the PIDs of every process in the cgroup <name> or below, in any hierarchy.
cgroup_pids() {
  local name=$1 h
  while read -r h; do
    [[ -d "${h}${name}" ]] || continue
    find "${h}${name}" -name cgroup.procs -exec cat {} + 2>/dev/null || true
  done < <(cgroup_hierarchies) | sort -un
}

# remove_cgroup_root <name> removes the cgroup <name> and every cgroup below it (rmdir: a cgroup
# holding a process stays, and the function fails).
remove_cgroup_root() {
  local name=$1 h rc=0
  while read -r h; do
    [[ -d "${h}${name}" ]] || continue
    find "${h}${name}" -depth -type d -exec rmdir {} + 2>/dev/null || true
    if [[ -d "${h}${name}" ]]; then
      log "could not remove cgroup ${h}${name}"
      rc=1
    fi
  done < <(cgroup_hierarchies)
  return "${rc}"
}

# mkdir_recorded <path> <record> creates <path> and its missing parents, appending each directory it
# created to <record> (outermost first).
mkdir_recorded() {
  local p=$1 record=$2 q=$1 missing=()
  while [[ ! -e "${q}" ]]; do
    missing=("${q}" "${missing[@]}")
    q=$(dirname "${q}")
  done
  for q in "${missing[@]}"; do
    mkdir "${q}"
    echo "${q}" >>"${record}"
  done
  [[ -d "${p}" ]] || die "${p} exists and is not a directory"
}

# free_port [taken...] prints a TCP port of 127.0.0.1 nobody uses now, from 20000-31999 (below the
# kernel's ephemeral range), other than the ports given.
free_port() {
  local p t _
  for _ in $(seq 500); do
    p=$((20000 + RANDOM % 12000))
    for t in "$@"; do
      [[ "${p}" == "${t}" ]] && continue 2
    done
    if [[ -z "$(ss -Htan "( sport = :${p} )")" ]]; then
      echo "${p}"
      return 0
    fi
  done
  die "found no free port in 20000-31999"
}

# proc_start_time <pid> prints the start time of the process (field 22 of /proc/<pid>/stat, in
# clock ticks since boot), which tells a process from a later one that reuses its PID.
proc_start_time() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  awk '{ print $20 }' <<<"${stat}"
}

# proc_alive <pid> [start time]: the process exists, is no zombie and (when given) started then.
proc_alive() {
  local pid=$1 want=${2:-} stat
  stat=$(cat "/proc/${pid}/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ "${stat:0:1}" != Z ]] || return 1
  [[ -z "${want}" ]] || [[ "$(awk '{ print $20 }' <<<"${stat}")" == "${want}" ]]
}

# start_component <statedir> <name> <command...> starts the command in a session of its own, its
# output in <statedir>/logs/<name>.log, and records "<pid> <start time>" in <statedir>/pids/<name>.
start_component() {
  local dir=$1 name=$2 pid start
  shift 2
  setsid "$@" </dev/null >"${dir}/logs/${name}.log" 2>&1 &
  pid=$!
  start=$(proc_start_time "${pid}") || die "${name} exited at once; see ${dir}/logs/${name}.log"
  echo "${pid} ${start}" >"${dir}/pids/${name}"
}

# check_components_alive fails naming the first component of $S that has exited.
check_components_alive() {
  local f pid start
  for f in "${S}"/pids/*; do
    [[ -f "${f}" ]] || continue
    read -r pid start <"${f}"
    proc_alive "${pid}" "${start}" || die "$(basename "${f}") (pid ${pid}) exited; see ${S}/logs/$(basename "${f}").log"
  done
}

# wait_for <what> <seconds> <command...> runs the command every 0.2 s until it succeeds, failing
# after <seconds> or as soon as a component has exited.
wait_for() {
  local what=$1 timeout=$2 deadline
  shift 2
  deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    check_components_alive
    ((SECONDS < deadline)) || die "timed out after ${timeout}s waiting for ${what}"
    sleep 0.2
  done
}

# elapsed <start> prints the seconds since <start> (date +%s.%N), one decimal.
elapsed() { awk -v s="$1" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f", n - s }'; }

# print_log_tails <statedir> prints the last lines of every component's log.
print_log_tails() {
  local f
  for f in "$1"/logs/*.log; do
    [[ -f "${f}" ]] || continue
    echo "==> ${f} (last ${LOG_TAIL_LINES:-30} lines) <=="
    tail -n "${LOG_TAIL_LINES:-30}" "${f}"
  done
}

# make_pki <dir> <node name> [more API server SANs]: a CA, serving certificates for the API server and the
# kubelet, client certificates for admin (system:masters), the kubelet (system:node:<node>), the API server's
# kubelet client, the controller manager, the scheduler and kube-proxy, and the service-account key pair.
make_pki() {
  local d=$1 node=$2 more_sans=${3:+,$3}
  (
    umask 077
    openssl ecparam -name prime256v1 -genkey -noout -out "${d}/ca.key"
    openssl req -x509 -new -key "${d}/ca.key" -subj "/CN=actionledger-test-cluster-ca" -days 7 \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -out "${d}/ca.crt"
    issue "${d}" apiserver "/CN=kube-apiserver" serverAuth \
      "IP:127.0.0.1,IP:127.0.100.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local${more_sans}"
    issue "${d}" kubelet-serving "/CN=${node}" serverAuth "IP:${node}"
    issue "${d}" admin "/O=system:masters/CN=actionledger-admin" clientAuth
    issue "${d}" kubelet "/O=system:nodes/CN=system:node:${node}" clientAuth
    issue "${d}" apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client" clientAuth
    issue "${d}" kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
    issue "${d}" kube-scheduler "/CN=system:kube-scheduler" clientAuth
    issue "${d}" kube-proxy "/CN=system:kube-proxy" clientAuth
    openssl ecparam -name prime256v1 -genkey -noout -out "${d}/sa.key"
    openssl ec -in "${d}/sa.key" -pubout -out "${d}/sa.pub" 2>/dev/null
  )
}

# issue <dir> <name> <subject> <serverAuth|clientAuth> [subjectAltName]: <name>.key and <name>.crt
# signed by <dir>/ca.*, valid 7 days.
issue() {
  local d=$1 name=$2 subj=$3 usage=$4 san=${5:-} ext
  ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=${usage}"
  [[ -z "${san}" ]] || ext+="
subjectAltName=${san}"
  openssl ecparam -name prime256v1 -genkey -noout -out "${d}/${name}.key"
  openssl req -new -key "${d}/${name}.key" -subj "${subj}" -out "${d}/${name}.csr"
  openssl x509 -req -in "${d}/${name}.csr" -CA "${d}/ca.crt" -CAkey "${d}/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 7 -extfile <(echo "${ext}") -out "${d}/${name}.crt" 2>/dev/null
  rm -f "${d}/${name}.csr"
}

# write_kubeconfig <file> <server URL> <pki dir> <cert name>
write_kubeconfig() {
  local file=$1 server=$2 pki=$3 cert=$4
  cat >"${file}" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: actionledger-test
  cluster:
    server: ${server}
    certificate-authority: ${pki}/ca.crt
users:
- name: ${cert}
  user:
    client-certificate: ${pki}/${cert}.crt
    client-key: ${pki}/${cert}.key
contexts:
- name: ${cert}@actionledger-test
  context:
    cluster: actionledger-test
    user: ${cert}
current-context: ${cert}@actionledger-test
EOF
}

# write_containerd_config <statedir> <sandbox image>: containerd 1.6, everything under
# <statedir>/containerd. restrict_oom_score_adj: runc cannot raise oom_score_adj without
# CAP_SYS_RESOURCE; io.containerd.runtime.v1.linux stays enabled (the CRI plugin needs it in 1.6).
# up.sh runs containerd with HTTP(S)_PROXY set to a closed loopback port: that keeps pulls local. Registries are
# configured per host in <statedir>/containerd/certs.d/<host:port>/hosts.toml (read at each pull), which is how a
# test lets the kubelet pull from a registry on 127.0.0.1 over plain HTTP.
write_containerd_config() {
  local dir=$1 image=$2 c
  c="${dir}/containerd"
  cat >"${c}/config.toml" <<EOF
version = 2
root = "${c}/root"
state = "${c}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "${c}/containerd.sock"

[ttrpc]
  address = "${c}/containerd.sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "${c}/opt"
  [plugins."io.containerd.runtime.v1.linux"]
    state = "${c}/state/v1-linux"
    runtime_root = "${c}/runc-v1"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "${image}"
    disable_apparmor = true
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "${c}/runc"
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "${c}/certs.d"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "${CNI_BIN_DIR}"
      conf_dir = "${dir}/cni/net.d"
      max_conf_num = 1
EOF
}

# write_cni_conflist <dir>: a network of the loopback plugin only. It makes the runtime's network
# ready (so the node is Ready); pods that are not hostNetwork cannot get an address from it.
write_cni_conflist() {
  cat >"$1/10-loopback.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "actionledger-loopback",
  "plugins": [{"type": "loopback"}]
}
EOF
}

# write_cni_bridge_conflist <dir> <subnet> <state dir>: the pod network of POD_NETWORK=1, the bridge plugin on
# cni0 (up.sh creates it, with the gateway address, in the cluster's network namespace) with host-local addresses
# of <subnet>, their allocations under <state dir>/cni/ipam. No ipMasq: nothing is routed out of the namespace.
write_cni_bridge_conflist() {
  cat >"$1/10-bridge.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "actionledger-pods",
  "plugins": [{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": "$2"}]],
      "routes": [{"dst": "0.0.0.0/0"}],
      "dataDir": "$3/cni/ipam"
    }
  }]
}
EOF
}

# write_kube_proxy_config <statedir> <node name> <cluster CIDR>: kube-proxy (iptables mode, upstream's default on
# Linux) in the cluster's network namespace. The conntrack settings are 0 so that it writes none of the
# net.netfilter.nf_conntrack_* sysctls (nf_conntrack_max and the hash size are the host's, not the namespace's).
write_kube_proxy_config() {
  local dir=$1 node=$2 cidr=$3
  cat >"${dir}/kube-proxy-config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: ${dir}/kube-proxy.kubeconfig
hostnameOverride: ${node}
clusterCIDR: ${cidr}
mode: iptables
bindAddress: ${node}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [primary]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
EOF
}

# HOST_NET_SYSCTLS are host network sysctls a pod network or kube-proxy would set if it ran in the host's network
# namespace; with POD_NETWORK=1 up.sh records them and down.sh checks that they did not change.
HOST_NET_SYSCTLS=(net/ipv4/ip_forward net/ipv4/conf/all/route_localnet net/netfilter/nf_conntrack_max net/bridge/bridge-nf-call-iptables)

# record_host_network prints the state of the host's network namespace that POD_NETWORK=1 must leave as it was:
# its addresses, routes, the nftables ruleset (iptables-nft's rules too; -s: without counters) and
# HOST_NET_SYSCTLS. Run it in the host's network namespace.
record_host_network() {
  local f
  ip -o addr show | awk '{ print $2, $3, $4 }'
  ip route show table all
  nft -s list ruleset 2>&1
  for f in "${HOST_NET_SYSCTLS[@]}"; do
    echo "${f} $(cat "/proc/sys/${f}" 2>/dev/null)"
  done
}

# netns_pids <ns> prints the PIDs of the processes in network namespace <ns> (as readlink /proc/<pid>/ns/net
# prints it).
netns_pids() { ns_pids net "$1"; }

# write_kubelet_config <statedir> <port> <healthz port> <cgroup root> [address] [more yaml]
write_kubelet_config() {
  local dir=$1 port=$2 healthz=$3 cgroot=$4 address=${5:-127.0.0.1} more=${6:-}
  cat >"${dir}/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ${address}
port: ${port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${healthz}
tlsCertFile: ${dir}/pki/kubelet-serving.crt
tlsPrivateKeyFile: ${dir}/pki/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: ${dir}/pki/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://${dir}/containerd/containerd.sock
imageServiceEndpoint: unix://${dir}/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: ${cgroot}
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
podLogsDir: ${dir}/pod-logs
volumePluginDir: ${dir}/kubelet-volume-plugins
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
makeIPTablesUtilChains: false
serializeImagePulls: false
clusterDomain: cluster.local
${more}
EOF
}

# stop_pids <what> <seconds> <pid[:start time]>...: SIGTERM to each live process, SIGKILL to those
# still alive after <seconds>; returns when all are gone (fails if one survives SIGKILL for 10 s).
stop_pids() {
  local what=$1 timeout=$2 e pid start live=() deadline
  shift 2
  for e in "$@"; do
    pid=${e%%:*}
    start=${e#*:}
    [[ "${start}" != "${e}" ]] || start=
    proc_alive "${pid}" "${start}" && live+=("${pid}:${start}")
  done
  ((${#live[@]} > 0)) || return 0
  for e in "${live[@]}"; do kill -TERM "${e%%:*}" 2>/dev/null || true; done
  deadline=$((SECONDS + timeout))
  while still_alive "${live[@]}" && ((SECONDS < deadline)); do sleep 0.1; done
  if still_alive "${live[@]}"; then
    log "${what}: SIGKILL after ${timeout}s"
    for e in "${live[@]}"; do
      pid=${e%%:*}
      start=${e#*:}
      if proc_alive "${pid}" "${start}"; then kill -KILL "${pid}" 2>/dev/null || true; fi
    done
    deadline=$((SECONDS + 10))
    while still_alive "${live[@]}" && ((SECONDS < deadline)); do sleep 0.1; done
    if still_alive "${live[@]}"; then
      log "${what}: still alive after SIGKILL"
      return 1
    fi
  fi
}

still_alive() {
  local e
  for e in "$@"; do
    proc_alive "${e%%:*}" "${e#*:}" && return 0
  done
  return 1
}

# mntns_pids <ns> prints the PIDs of the processes in mount namespace <ns> (as readlink
# /proc/<pid>/ns/mnt prints it).
mntns_pids() { ns_pids mnt "$1"; }

# ns_pids <type> <ns> prints the PIDs of the processes whose /proc/<pid>/ns/<type> links to <ns> (one stat for
# all: a readlink per process takes seconds on a busy machine).
ns_pids() {
  stat -c '%N' /proc/[0-9]*/ns/"$1" 2>/dev/null |
    awk -v want="'$2'" '$3 == want { split($1, p, "/"); print p[3] }' || true
}
