#!/usr/bin/env bash
# run-local.sh runs actionledger on this machine with no cluster, no container and no download:
# etcd and kube-apiserver (built from Go modules into bin/k8s by hack/build-controlplane.sh) on
# loopback, the CRDs, the demo destination (bin/demo-destination), the manager
# (bin/actionledger) and the HTTP gateway (bin/actionledger gateway, TLS with a certificate of the
# script's local CA) as plain processes. It applies config/samples (a Destination "demo" and the
# ExternalAction "invoice-7"), waits until the action is Ready, prints the kubectl commands to try
# and stays in the foreground. Ctrl-C (or SIGTERM) stops every process it started.
#
# `make run-local` builds what it needs and runs this script. Each run starts from an empty etcd.
#
# Environment:
#   RUN_LOCAL_DIR              state directory: kubeconfig, PKI, etcd data, logs (default ./.local)
#   RUN_LOCAL_DEST_ADDR        demo destination address (default 127.0.0.1:8089)
#   RUN_LOCAL_ALLOW_CIDRS      the manager's --destination-allow-cidrs (default: the demo destination's
#                              address as /32 or /128: loopback is denied by default, docs/security.md)
#   RUN_LOCAL_METRICS_ADDR     manager metrics address, plain HTTP (default 127.0.0.1:8080)
#   RUN_LOCAL_PROBE_ADDR       manager health probe address (default 127.0.0.1:8081)
#   RUN_LOCAL_GATEWAY_ADDR     gateway address, HTTPS (default 127.0.0.1:9443; docs/gateway.md)
#   RUN_LOCAL_GATEWAY_METRICS_ADDR gateway metrics address, HTTPS (default 127.0.0.1:9444)
#   RUN_LOCAL_BIN_DIR          where actionledger and demo-destination are (default ./bin)
#   KUBEBUILDER_ASSETS         where etcd, kube-apiserver, kubectl are (default ./bin/k8s/<ver>-<os>-<arch>)
#   RUN_LOCAL_EXIT_AFTER_READY =1: stop everything and exit 0 once the sample is Ready (tests)
#   RUN_LOCAL_TIMEOUT          seconds to wait for each start-up step (default 180)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "${root}"

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
assets=${KUBEBUILDER_ASSETS:-${root}/bin/k8s/${KUBE_VERSION#v}-$(go env GOOS 2>/dev/null || echo linux)-$(go env GOARCH 2>/dev/null || echo amd64)}
bindir=${RUN_LOCAL_BIN_DIR:-${root}/bin}
state=${RUN_LOCAL_DIR:-${root}/.local}
dest_addr=${RUN_LOCAL_DEST_ADDR:-127.0.0.1:8089}
metrics_addr=${RUN_LOCAL_METRICS_ADDR:-127.0.0.1:8080}
probe_addr=${RUN_LOCAL_PROBE_ADDR:-127.0.0.1:8081}
gateway_addr=${RUN_LOCAL_GATEWAY_ADDR:-127.0.0.1:9443}
gateway_metrics_addr=${RUN_LOCAL_GATEWAY_METRICS_ADDR:-127.0.0.1:9444}
timeout=${RUN_LOCAL_TIMEOUT:-180}
dest_host=${dest_addr%:*}
dest_host=${dest_host#[}
dest_host=${dest_host%]}
case "${dest_host}" in
  localhost) default_allow=127.0.0.1/32,::1/128 ;;
  *:*) default_allow=${dest_host}/128 ;;
  *) default_allow=${dest_host}/32 ;;
esac
allow_cidrs=${RUN_LOCAL_ALLOW_CIDRS:-${default_allow}}
kubectl="${assets}/kubectl"

log() { echo "run-local: $*" >&2; }
die() { log "error: $*"; exit 1; }

for f in "${assets}/etcd" "${assets}/kube-apiserver" "${kubectl}"; do
  [[ -x "${f}" ]] || die "${f} is missing: run 'make controlplane' (or 'make run-local', which builds it)"
done
for f in "${bindir}/actionledger" "${bindir}/demo-destination"; do
  [[ -x "${f}" ]] || die "${f} is missing: run 'make build' (or 'make run-local', which builds it)"
done
command -v openssl >/dev/null || die "openssl is needed to create the local certificates"

mkdir -p "${state}"
state=$(cd "${state}" && pwd)
logs="${state}/logs"
pki="${state}/pki"
kubeconfig="${state}/kubeconfig"
pidfile="${state}/pids"

# One run per state directory. The lock fd is closed for the children (9>&- in start), so a
# stale lock cannot outlive this script.
exec 9>"${state}/lock"
flock -n 9 || die "another run-local is using ${state} (stop it, or set RUN_LOCAL_DIR)"

# marker is put in every child's environment: it identifies this state directory's processes
# when a previous run was killed without cleaning up (kill -9 of the script).
marker="ACTIONLEDGER_RUN_LOCAL=${state}"

stop_group() { # stop_group NAME PID: SIGTERM the process group, SIGKILL it after 15s, reap it.
  local name=$1 pid=$2 i stat
  kill -TERM -- "-${pid}" 2>/dev/null || kill -TERM "${pid}" 2>/dev/null || return 0
  for ((i = 0; i < 150; i++)); do
    stat=$(ps -o stat= -p "${pid}" 2>/dev/null || true)
    [[ -z "${stat}" || "${stat}" == Z* ]] && break
    sleep 0.1
  done
  kill -KILL -- "-${pid}" 2>/dev/null || true
  wait "${pid}" 2>/dev/null || true
  log "stopped ${name} (pid ${pid})"
}

# A previous run that was SIGKILLed leaves its processes behind: stop those recorded in the
# pidfile that still carry this directory's marker.
if [[ -f "${pidfile}" ]]; then
  while read -r name pid; do
    [[ -n "${pid:-}" && -r "/proc/${pid}/environ" ]] || continue
    if tr '\0' '\n' <"/proc/${pid}/environ" 2>/dev/null | grep -qxF "${marker}"; then
      log "stopping ${name} (pid ${pid}) left by a previous run"
      kill -KILL -- "-${pid}" 2>/dev/null || kill -KILL "${pid}" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
    fi
  done <"${pidfile}"
  rm -f "${pidfile}"
fi

names=()
pids=()
cleaning=0
cleanup() {
  local rc=$? i
  ((cleaning)) && return
  cleaning=1
  trap - INT TERM EXIT
  if ((${#pids[@]})); then
    log "stopping ..."
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do # reverse start order: manager before the apiserver
      stop_group "${names[i]}" "${pids[i]}"
    done
  fi
  rm -f "${pidfile}"
  exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start() { # start NAME CMD...: run CMD in its own session and process group, logging to logs/NAME.log
  local name=$1
  shift
  env "${marker}" setsid "$@" >"${logs}/${name}.log" 2>&1 </dev/null 9>&- &
  local pid=$!
  names+=("${name}")
  pids+=("${pid}")
  echo "${name} ${pid}" >>"${pidfile}"
  log "started ${name} (pid ${pid}), log ${logs}/${name}.log"
}

alive() { # alive PID: true while PID runs (not a zombie)
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null || true)
  [[ -n "${stat}" && "${stat}" != Z* ]]
}

wait_until() { # wait_until WHAT PID CMD...: poll CMD every 0.5s until it succeeds
  local what=$1 pid=$2 deadline=$((SECONDS + timeout))
  shift 2
  until "$@" >/dev/null 2>&1; do
    alive "${pid}" || die "${what}: the process exited; see its log in ${logs}"
    ((SECONDS < deadline)) || die "${what}: not ready after ${timeout}s; see ${logs}"
    sleep 0.5
  done
}

listening() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; } # listening HOST PORT

port_in_use() { # port_in_use PORT: true when a socket in any state (listening, connected) uses PORT
  if command -v ss >/dev/null; then
    [[ -n "$(ss -Htan "( sport = :$1 )" 2>/dev/null)" ]] && return 0
  fi
  listening 127.0.0.1 "$1"
}

free_port() { # a free port below the kernel's ephemeral range (32768+), where envtest and clients pick theirs
  local p i
  for ((i = 0; i < 100; i++)); do
    p=$((10000 + RANDOM % 22000))
    port_in_use "${p}" || { echo "${p}"; return; }
  done
  die "no free port found"
}

check_addr_free() { # check_addr_free WHAT HOST:PORT VAR
  local host=${2%:*} port=${2##*:}
  [[ -z "${host}" ]] && host=127.0.0.1
  ! listening "${host}" "${port}" || die "${1} address ${2} is in use (set ${3} to another address)"
}
check_addr_free "demo destination" "${dest_addr}" RUN_LOCAL_DEST_ADDR
check_addr_free "metrics" "${metrics_addr}" RUN_LOCAL_METRICS_ADDR
check_addr_free "health probe" "${probe_addr}" RUN_LOCAL_PROBE_ADDR
check_addr_free "gateway" "${gateway_addr}" RUN_LOCAL_GATEWAY_ADDR
check_addr_free "gateway metrics" "${gateway_metrics_addr}" RUN_LOCAL_GATEWAY_METRICS_ADDR

# Fresh etcd data and logs each run; the PKI is kept (it does not depend on the ports).
rm -rf "${state}/etcd" "${logs}"
mkdir -p "${logs}" "${pki}"

if [[ ! -s "${pki}/admin.crt" ]]; then
  log "creating certificates in ${pki}"
  (
    cd "${pki}"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=actionledger-local-ca" \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    # The admin user is in system:masters: RBAC lets it (and the manager, which uses the same
    # kubeconfig) do everything, as cluster-admin would.
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=actionledger-admin" \
      -keyout admin.key -out admin.csr 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >admin.ext
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile admin.ext -out admin.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    rm -f ./*.csr ./*.ext ca.srl
  ) || die "creating certificates with openssl failed"
fi

# The gateway's serving certificate, from the same CA (a PKI of an earlier run may lack it).
if [[ ! -s "${pki}/gateway.crt" ]]; then
  (
    cd "${pki}"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=actionledger-gateway" -keyout gateway.key -out gateway.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >gateway.ext
    openssl x509 -req -in gateway.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile gateway.ext -out gateway.crt 2>/dev/null
    rm -f gateway.csr gateway.ext ca.srl
  ) || die "creating the gateway certificate with openssl failed"
fi

etcd_port=$(free_port)
peer_port=$(free_port)
[[ "${peer_port}" != "${etcd_port}" ]] || peer_port=$(free_port)
api_port=$(free_port)
while [[ "${api_port}" == "${etcd_port}" || "${api_port}" == "${peer_port}" ]]; do api_port=$(free_port); done

start etcd "${assets}/etcd" \
  --name=actionledger-local \
  --data-dir="${state}/etcd" \
  --listen-client-urls="http://127.0.0.1:${etcd_port}" \
  --advertise-client-urls="http://127.0.0.1:${etcd_port}" \
  --listen-peer-urls="http://127.0.0.1:${peer_port}" \
  --initial-advertise-peer-urls="http://127.0.0.1:${peer_port}" \
  --initial-cluster="actionledger-local=http://127.0.0.1:${peer_port}" \
  --unsafe-no-fsync=true

# The flags envtest passes (controller-runtime pkg/internal/testing/controlplane), with client
# certificates for authentication and RBAC for authorization.
start kube-apiserver "${assets}/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:${etcd_port}" \
  --bind-address=127.0.0.1 \
  --secure-port="${api_port}" \
  --cert-dir="${pki}" \
  --tls-cert-file="${pki}/apiserver.crt" \
  --tls-private-key-file="${pki}/apiserver.key" \
  --client-ca-file="${pki}/ca.crt" \
  --authorization-mode=RBAC \
  --service-cluster-ip-range=10.0.0.0/24 \
  --allow-privileged=true \
  --disable-admission-plugins=ServiceAccount \
  --service-account-issuer="https://127.0.0.1:${api_port}/" \
  --service-account-key-file="${pki}/sa.key" \
  --service-account-signing-key-file="${pki}/sa.key"

b64() { base64 <"$1" | tr -d '\n'; }
umask_old=$(umask)
umask 077
cat >"${kubeconfig}" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: actionledger-local
  cluster:
    server: https://127.0.0.1:${api_port}
    certificate-authority-data: $(b64 "${pki}/ca.crt")
users:
- name: actionledger-admin
  user:
    client-certificate-data: $(b64 "${pki}/admin.crt")
    client-key-data: $(b64 "${pki}/admin.key")
contexts:
- name: actionledger-local
  context:
    cluster: actionledger-local
    user: actionledger-admin
    namespace: default
current-context: actionledger-local
EOF
umask "${umask_old}"
export KUBECONFIG="${kubeconfig}"

log "waiting for kube-apiserver on https://127.0.0.1:${api_port} ..."
wait_until "kube-apiserver" "${pids[1]}" "${kubectl}" get --raw /readyz
wait_until "namespace default" "${pids[1]}" "${kubectl}" get namespace default

log "installing the CRDs (config/crd/bases)"
"${kubectl}" apply -f config/crd/bases >/dev/null
"${kubectl}" wait --for=condition=Established --timeout="${timeout}s" -f config/crd/bases >/dev/null
# The finalizer, the requested-by annotation, the signing.hmac.payload and response.expose defaults at admission, as
# config/default ships them (the local 1.37 API server serves MutatingAdmissionPolicy;
# docs/retention.md#deletion, docs/gateway.md, docs/auth.md).
log "installing the admission policies (config/admission)"
"${kubectl}" apply -f config/admission/finalizer_policy.yaml -f config/admission/requested_by_policy.yaml \
  -f config/admission/hmac_payload_policy.yaml -f config/admission/response_expose_policy.yaml >/dev/null
# A MutatingAdmissionPolicy needs the CRD's published OpenAPI schema, which a loaded API server publishes some
# seconds after Established (until then a create is refused: "Resource kind ... not found"). A server-side dry
# run goes through admission: wait until it passes.
wait_until "admission of ExternalActions" "${pids[1]}" "${kubectl}" apply --dry-run=server \
  -f config/samples/actions_v1alpha1_externalaction.yaml

start demo-destination "${bindir}/demo-destination" --listen "${dest_addr}" --dedup
start actionledger "${bindir}/actionledger" \
  --kubeconfig="${kubeconfig}" \
  --leader-elect=false \
  --metrics-bind-address="${metrics_addr}" \
  --metrics-secure=false \
  --health-probe-bind-address="${probe_addr}" \
  --controller-namespace=default \
  --destination-allow-cidrs="${allow_cidrs}"
# The gateway uses the admin kubeconfig here (which may impersonate anyone); in a cluster it runs as its own
# ServiceAccount with config/gateway/role.yaml (constrained impersonation). It listens once its informer
# cache has synced.
start gateway "${bindir}/actionledger" gateway \
  --kubeconfig="${kubeconfig}" \
  --bind-address="${gateway_addr}" \
  --metrics-bind-address="${gateway_metrics_addr}" \
  --health-probe-bind-address=0 \
  --tls-cert-file="${pki}/gateway.crt" \
  --tls-key-file="${pki}/gateway.key"
gateway_pid=${pids[${#pids[@]} - 1]}

# The samples point at the default destination address; follow RUN_LOCAL_DEST_ADDR.
log "applying config/samples: Destination demo, ExternalAction invoice-7"
sed "s#http://127.0.0.1:8089#http://${dest_addr}#" config/samples/actions_v1alpha1_destination.yaml >"${logs}/destination.yaml"
# A loaded API server can still refuse a create right after the dry run passed ("Resource kind ... not found",
# 503, while it republishes the CRDs' discovery): apply is idempotent, so it is retried until it passes.
wait_until "applying the sample Destination" "${pids[1]}" "${kubectl}" apply -f "${logs}/destination.yaml"
wait_until "applying the sample ExternalAction" "${pids[1]}" "${kubectl}" apply -f config/samples/actions_v1alpha1_externalaction.yaml
log "applied Destination demo and ExternalAction invoice-7"

# A caller for the gateway: the ServiceAccount "checkout" may create and get ExternalActions in default.
"${kubectl}" create serviceaccount checkout >/dev/null
"${kubectl}" create role checkout --verb=create,get --resource=externalactions.actions.actionledger.dev >/dev/null
"${kubectl}" create rolebinding checkout --role=checkout --serviceaccount=default:checkout >/dev/null
log "waiting for the gateway on https://${gateway_addr} ..."
wait_until "gateway" "${gateway_pid}" listening "${gateway_addr%:*}" "${gateway_addr##*:}"

log "waiting for externalaction/invoice-7 to be Ready ..."
if ! "${kubectl}" wait --for=condition=Ready externalaction/invoice-7 --timeout="${timeout}s" >&2; then
  "${kubectl}" get xa -o wide >&2 || true
  tail -n 20 "${logs}/actionledger.log" >&2 || true
  die "the sample did not become Ready; see ${logs}"
fi
"${kubectl}" get xa -o wide >&2

kubectl_rel=${kubectl#"${root}/"}
cat <<EOF

actionledger is running on a local control plane.
  kubeconfig:        ${kubeconfig}
  logs:              ${logs}/{etcd,kube-apiserver,demo-destination,actionledger,gateway}.log
  metrics:           http://${metrics_addr}/metrics
  demo destination:  http://${dest_addr} (GET /_summary counts the requests)
  gateway:           https://${gateway_addr} (CA ${pki}/ca.crt; docs/gateway.md)

Try:
  export KUBECONFIG=${kubeconfig}
  ${kubectl_rel} get xa
  ${kubectl_rel} get xa -o wide
  ${kubectl_rel} get xa invoice-7 -o yaml
  ${kubectl_rel} wait --for=condition=Ready externalaction/invoice-7
  ${kubectl_rel} get xdest
  ${kubectl_rel} explain externalaction.spec

The gateway (the ServiceAccount checkout may create and get actions in namespace default):
  TOKEN=\$(${kubectl_rel} create token checkout)
  curl --cacert ${pki}/ca.crt -H "Authorization: Bearer \$TOKEN" -H 'Idempotency-Key: "order-1"' \\
    -H 'Content-Type: application/json' -d '{"amount":1}' \\
    https://${gateway_addr}/v1/namespaces/default/destinations/demo/charges

Processes: $(for i in "${!pids[@]}"; do printf '%s=%s ' "${names[i]}" "${pids[i]}"; done)
EOF

if [[ "${RUN_LOCAL_EXIT_AFTER_READY:-}" == "1" ]]; then
  log "RUN_LOCAL_EXIT_AFTER_READY=1: stopping"
  exit 0
fi

echo "Press Ctrl-C to stop everything."
# Stay in the foreground until a signal arrives or one of the processes exits on its own.
set +e
wait -n "${pids[@]}"
rc=$?
set -e
for i in "${!pids[@]}"; do
  alive "${pids[i]}" || log "${names[i]} (pid ${pids[i]}) exited unexpectedly (status ${rc}); see ${logs}/${names[i]}.log"
done
exit 1
