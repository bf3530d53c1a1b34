#!/usr/bin/env bash
# helm-chart.sh regenerates the Helm chart from config/default into OUT/chart (default OUT: dist) with
# kubebuilder's helm/v2-alpha plugin, run in a scratch directory on the kustomize render, so that it
# neither runs 'make build-installer' (which edits config/manager) nor adds its Makefile targets and CI
# workflow here. Only the hand-kept files seed it (dist/chart/Chart.yaml, values.yaml, and the templates
# under dist/chart/templates/hand-kept/), and every other template comes back regenerated: a template
# config/ no longer produces disappears. `make helm-chart` runs it; test/integration/ecosystem/helm_test.go
# runs it into a temporary directory and fails on drift.
#
# The plugin keeps one ServiceAccount (the manager's): the gateway's ServiceAccount (config/gateway) is
# left out of its input and kept by hand in dist/chart/templates/hand-kept/gateway-serviceaccount.yaml;
# helm_test.go checks that the chart still renders every object of config/default.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${root}/dist}
KUSTOMIZE=${KUSTOMIZE:-${root}/bin/kustomize}
KUBEBUILDER=${KUBEBUILDER:-${root}/bin/kubebuilder}
tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT

cp "${root}/PROJECT" "${tmp}/"
mkdir -p "${tmp}/dist/chart"
# Drop the documents that are both a ServiceAccount and part of the gateway (kustomize separates documents
# with a line "---").
"${KUSTOMIZE}" build "${root}/config/default" | awk '
  function flush() { if (doc != "" && !(doc ~ /\nkind: ServiceAccount\n/ && doc ~ /app\.kubernetes\.io\/component: gateway/)) printf "%s---\n", doc; doc = "" }
  $0 == "---" { flush(); next }
  { doc = doc $0 "\n" }
  END { flush() }
  BEGIN { doc = "" }' >"${tmp}/install.yaml"
for f in Chart.yaml values.yaml; do
  if [[ -f "${root}/dist/chart/${f}" ]]; then cp "${root}/dist/chart/${f}" "${tmp}/dist/chart/"; fi
done
(cd "${tmp}" && "${KUBEBUILDER}" edit --plugins=helm/v2-alpha --manifests=install.yaml --output-dir=dist)
# The admission policies and their bindings (config/admission) render only when their value is enabled
# (.Values.finalizerPolicy.enabled, .Values.requestedByPolicy.enabled, .Values.hmacPayloadPolicy.enabled,
# .Values.responseExposePolicy.enabled) and the cluster serves
# admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes 1.36+), so the chart still installs on
# older clusters, where the manager adds the finalizer itself and requested-by is what the creator wrote. The
# plugin cannot express the condition: it is added here.
for policy in externalaction-finalizer:finalizerPolicy externalaction-requested-by:requestedByPolicy destination-hmac-payload:hmacPayloadPolicy \
  clusterdestination-response-expose:responseExposePolicy; do
  name=${policy%%:*}
  cond="{{- if and .Values.${policy#*:}.enabled (.Capabilities.APIVersions.Has \"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy\") }}"
  for f in "${name}.yaml" "${name}-binding.yaml"; do
    f="${tmp}/dist/chart/templates/extras/${f}"
    [[ -f "${f}" ]] || { echo "helm-chart.sh: the plugin did not produce ${f#"${tmp}"/} (did config/admission change?)" >&2; exit 1; }
    { echo "${cond}"; cat "${f}"; echo '{{- end }}'; } >"${f}.tmp"
    mv "${f}.tmp" "${f}"
  done
done
# The gateway (config/gateway) is the manager's binary ('/manager gateway'): its image follows
# .Values.manager.image like the manager's, which the plugin does only for the manager's Deployment.
gw="${tmp}/dist/chart/templates/extras/gateway.yaml"
[[ -f "${gw}" ]] || { echo "helm-chart.sh: the plugin did not produce templates/extras/gateway.yaml (did config/gateway change?)" >&2; exit 1; }
img=$(grep -m1 -E '^ +image: "\{\{ \.Values\.manager\.image\.repository' "${tmp}/dist/chart/templates/manager/manager.yaml" | sed -E 's/^ +image: //')
[[ -n "${img}" ]] || { echo "helm-chart.sh: no templated image line in templates/manager/manager.yaml" >&2; exit 1; }
grep -q '^        image: controller:latest$' "${gw}" || { echo "helm-chart.sh: templates/extras/gateway.yaml has no 'image: controller:latest' line" >&2; exit 1; }
# Both name the image through hand-kept/_image.tpl, which adds .Values.manager.image.digest (a release pins the image
# by digest, make release).
inc='{{ include "actionledger.image" . | quote }}'
IMG="${inc}" awk '$0 == "        image: controller:latest" { print "        image: " ENVIRON["IMG"]; next } { print }' "${gw}" >"${gw}.tmp"
mv "${gw}.tmp" "${gw}"
IMG="${img}" INC="${inc}" awk '$0 == "        image: " ENVIRON["IMG"] { print "        image: " ENVIRON["INC"]; next } { print }' "${tmp}/dist/chart/templates/manager/manager.yaml" >"${tmp}/manager.yaml.tmp"
mv "${tmp}/manager.yaml.tmp" "${tmp}/dist/chart/templates/manager/manager.yaml"
# replace FILE OLD NEW [COUNT] replaces each line of FILE equal to OLD by NEW (one line or several) and fails
# unless OLD occurs COUNT times (default 1), so that a plugin whose output changed stops the script instead of
# shipping a chart without the edit.
replace() {
  local f=$1 old=$2 new=$3 want=${4:-1} n
  n=$(grep -cxF -- "${old}" "${f}" || true)
  [[ "${n}" == "${want}" ]] || { echo "helm-chart.sh: ${f#"${tmp}"/}: want ${want} line(s) '${old}', found ${n}" >&2; exit 1; }
  OLD="${old}" NEW="${new}" awk '$0 == ENVIRON["OLD"] { print ENVIRON["NEW"]; next } { print }' "${f}" >"${f}.tmp"
  mv "${f}.tmp" "${f}"
}
# For clusters without a pod network or kube-proxy (values.yaml: hostNetwork, kubernetesService, gateway.*),
# none of which config/ has: the manager and the gateway run on the host's network when .Values.hostNetwork,
# with the API server address of .Values.kubernetesService (the helper in hand-kept/_kubernetes-service.tpl),
# and the gateway listens on ports of its own (the plugin gave it the manager's) so that both fit on one node.
# The manager's metrics container port follows .Values.metrics.port like its flag.
mgr="${tmp}/dist/chart/templates/manager/manager.yaml"
gws="${tmp}/dist/chart/templates/extras/gateway-service.yaml"
hostnet='    spec:
      {{- if .Values.hostNetwork }}
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      {{- end }}'
replace "${mgr}" '    spec:' "${hostnet}"
replace "${gw}" '    spec:' "${hostnet}"
envif='        {{- if or .Values.manager.env (and (kindIs "map" .Values.manager.envOverrides) (not (empty .Values.manager.envOverrides))) }}'
replace "${mgr}" "${envif}" '        {{- if or .Values.manager.env (and (kindIs "map" .Values.manager.envOverrides) (not (empty .Values.manager.envOverrides))) .Values.kubernetesService.host }}
          {{- with include "actionledger.kubernetesServiceEnv" . }}
          {{- . | nindent 10 }}
          {{- end }}'
replace "${mgr}" '        - containerPort: 8443' '        - containerPort: {{ .Values.metrics.port }}'
replace "${gw}" '        - /manager' '        - /manager
        {{- with include "actionledger.kubernetesServiceEnv" . }}
        env:
          {{- . | nindent 10 }}
        {{- end }}'
replace "${gw}" '  replicas: 2' '  replicas: {{ .Values.gateway.replicas }}
  {{- with .Values.gateway.strategy }}
  strategy: {{ toYaml . | nindent 4 }}
  {{- end }}'
replace "${gw}" '        - --bind-address=:9443' '        - --bind-address=:{{ .Values.gateway.port }}'
replace "${gw}" '        - --metrics-bind-address=:{{ .Values.metrics.port }}' '        - --metrics-bind-address=:{{ .Values.gateway.metrics.port }}'
replace "${gw}" '        - --health-probe-bind-address=:{{ .Values.manager.healthProbe.port }}' '        - --health-probe-bind-address=:{{ .Values.gateway.healthProbe.port }}'
replace "${gw}" '        - containerPort: 9443' '        - containerPort: {{ .Values.gateway.port }}'
replace "${gw}" '        - containerPort: 8443' '        - containerPort: {{ .Values.gateway.metrics.port }}'
replace "${gw}" '        - containerPort: {{ .Values.manager.healthProbe.port }}' '        - containerPort: {{ .Values.gateway.healthProbe.port }}'
replace "${gw}" '            port: {{ .Values.manager.healthProbe.port }}' '            port: {{ .Values.gateway.healthProbe.port }}' 3
replace "${gws}" '    targetPort: 9443' '    targetPort: {{ .Values.gateway.port }}'
replace "${gws}" '    targetPort: 8443' '    targetPort: {{ .Values.gateway.metrics.port }}'
# The tenancy mode (config/manager's --require-service-account) as one value, .Values.tenancy.requireServiceAccount
# (default true): the plugin moves config's args into values.yaml's manager.args, which is kept by hand, so a
# single-team install turns the mode off with that one value instead of restating the args.
# The evaluation slots and their CPU budget (config/manager's --evaluation-slots, --evaluation-cpu) as
# .Values.manager.evaluationSlots and .Values.manager.evaluationCPU, for the same reason; the status-write seats
# (--status-write-seats) as .Values.manager.statusWriteSeats, the contended reconciles (--contended-reconciles) as
# .Values.manager.contendedReconciles and the dominant namespace's (--dominant-reconciles) as
# .Values.manager.dominantReconciles.
replace "${mgr}" '        {{- range .Values.manager.args }}' '        - --require-service-account={{ .Values.tenancy.requireServiceAccount }}
        {{- with .Values.manager.evaluationSlots }}
        - --evaluation-slots={{ . }}
        {{- end }}
        {{- with .Values.manager.evaluationCPU }}
        - --evaluation-cpu={{ . }}
        {{- end }}
        {{- with .Values.manager.statusWriteSeats }}
        - --status-write-seats={{ . }}
        {{- end }}
        {{- with .Values.manager.contendedReconciles }}
        - --contended-reconciles={{ . }}
        {{- end }}
        {{- with .Values.manager.dominantReconciles }}
        - --dominant-reconciles={{ . }}
        {{- end }}
        {{- range .Values.manager.args }}'
# The flags users set most, as values (values.yaml: manager.logLevel, manager.egress, manager.extraArgs), so that an
# install never replaces manager.args (which holds --leader-elect=true) to add one: appended after manager.args.
replace "${mgr}" '        command:' '        {{- with .Values.manager.logLevel }}
        - --zap-log-level={{ . }}
        {{- end }}
        {{- with .Values.manager.egress }}
        {{- with .allowCIDRs }}
        - --destination-allow-cidrs={{ join "," . }}
        {{- end }}
        {{- with .denyCIDRs }}
        - --destination-deny-cidrs={{ join "," . }}
        {{- end }}
        {{- end }}
        {{- range .Values.manager.extraArgs }}
        - {{ tpl . $ }}
        {{- end }}
        command:'
# The gateway is optional (.Values.gateway.enabled, default false): an install that does not need the HTTP front
# door has no TLS Secret to make first. Its serving Secret is .Values.gateway.tls.secretName, made by the chart when
# .Values.gateway.tls.generate (hand-kept/gateway-tls.yaml).
for f in "${gw}" "${gws}" "${tmp}/dist/chart/templates/rbac/gateway-role.yaml" "${tmp}/dist/chart/templates/rbac/gateway-rolebinding.yaml"; do
  [[ -f "${f}" ]] || { echo "helm-chart.sh: the plugin did not produce ${f#"${tmp}"/}" >&2; exit 1; }
  { echo '{{- if .Values.gateway.enabled }}'; cat "${f}"; echo '{{- end }}'; } >"${f}.tmp"
  mv "${f}.tmp" "${f}"
done
replace "${gw}" '          secretName: {{ include "actionledger.resourceName" (dict "suffix" "gateway-tls" "context" $) }}' \
  '          secretName: {{ include "actionledger.gatewayTLSSecretName" . }}'
# The tenants' roles aggregate into the built-in admin, edit and view ClusterRoles (.Values.rbac.aggregate, default
# true; not with rbac.namespaced, where they are Roles): the editor roles of ExternalActions and Destinations into
# admin and edit, the viewer roles of ExternalActions, Destinations and ActionTombstones into view (and so into edit
# and admin). They render when aggregated even with .Values.rbac.helpers.enabled false. config/rbac has the labels
# (config/default aggregates too); here they become conditional.
agg='{{- if and .Values.rbac.aggregate (not .Values.rbac.namespaced) }}'
for role in externalaction-editor-role:edit destination-editor-role:edit externalaction-viewer-role:view \
  destination-viewer-role:view actiontombstone-viewer-role:view; do
  f="${tmp}/dist/chart/templates/rbac/${role%%:*}.yaml"
  [[ -f "${f}" ]] || { echo "helm-chart.sh: the plugin did not produce ${f#"${tmp}"/}" >&2; exit 1; }
  labels='    rbac.authorization.k8s.io/aggregate-to-admin: "true"
    rbac.authorization.k8s.io/aggregate-to-edit: "true"'
  if [[ "${role#*:}" == view ]]; then
    labels="${labels}"'
    rbac.authorization.k8s.io/aggregate-to-view: "true"'
  fi
  # config/rbac carries the labels (for config/default); the chart renders them only when aggregating.
  want=2
  [[ "${role#*:}" == view ]] && want=3
  n=$(grep -c '^    rbac.authorization.k8s.io/aggregate-to-' "${f}" || true)
  [[ "${n}" == "${want}" ]] || { echo "helm-chart.sh: ${f#"${tmp}"/}: want ${want} aggregate-to labels from config/rbac, found ${n}" >&2; exit 1; }
  grep -v '^    rbac.authorization.k8s.io/aggregate-to-' "${f}" >"${f}.tmp"
  mv "${f}.tmp" "${f}"
  replace "${f}" '{{- if .Values.rbac.helpers.enabled }}' '{{- if or .Values.rbac.helpers.enabled (and .Values.rbac.aggregate (not .Values.rbac.namespaced)) }}'
  replace "${f}" '    app.kubernetes.io/instance: {{ .Release.Name }}' "    app.kubernetes.io/instance: {{ .Release.Name }}
    ${agg}
${labels}
    {{- end }}"
done
# The manager's priority level and FlowSchema (config/flowcontrol) render when .Values.priorityAndFairness.enabled
# and the cluster serves flowcontrol.apiserver.k8s.io/v1 (Kubernetes 1.29+), with the level's shares from the
# values; the FlowSchema names the manager's ServiceAccount as the RBAC bindings do (serviceAccount.name when
# the chart does not create it).
apf='{{- if and .Values.priorityAndFairness.enabled (.Capabilities.APIVersions.Has "flowcontrol.apiserver.k8s.io/v1") }}'
plc="${tmp}/dist/chart/templates/extras/manager.yaml"
fs="${tmp}/dist/chart/templates/extras/manager-flowschema.yaml"
replace "${plc}" '    nominalConcurrencyShares: 40' '    nominalConcurrencyShares: {{ .Values.priorityAndFairness.nominalConcurrencyShares }}'
replace "${plc}" '    lendablePercent: 50' '    lendablePercent: {{ .Values.priorityAndFairness.lendablePercent }}'
replace "${fs}" '        name: {{ include "actionledger.resourceName" (dict "suffix" "controller-manager" "context" $) }}' '        name: {{ include "actionledger.serviceAccountName" . }}'
for f in "${plc}" "${fs}"; do
  { echo "${apf}"; cat "${f}"; echo '{{- end }}'; } >"${f}.tmp"
  mv "${f}.tmp" "${f}"
done
# The alerts (config/prometheus/rules.yaml, a PrometheusRule) are not in config/default, so the plugin does
# not see them: they are rendered here into templates/prometheus/rules.yaml, shown when
# .Values.prometheus.enabled and .Values.prometheus.rules.enabled. The rules' own Go templates
# ({{ $value }}, {{ $labels }}) are escaped so that Helm passes them through to Prometheus unchanged.
rules="${tmp}/dist/chart/templates/prometheus/rules.yaml"
mkdir -p "$(dirname "${rules}")"
{
  echo '{{- if and .Values.prometheus.enabled .Values.prometheus.rules.enabled }}'
  awk '
    /^#/ && !started { next }
    { started = 1 }
    /^  name: alerts$/ { print "  name: {{ include \"actionledger.resourceName\" (dict \"suffix\" \"alerts\" \"context\" $) }}"; next }
    /^  namespace: system$/ { print "  namespace: {{ .Release.Namespace }}"; next }
    /^    app.kubernetes.io\/managed-by: kustomize$/ { print "    app.kubernetes.io/managed-by: {{ .Release.Service }}"; next }
    {
      gsub(/\{\{/, "\001"); gsub(/\}\}/, "\002")
      gsub(/\001/, "{{ \"{{\" }}"); gsub(/\002/, "{{ \"}}\" }}")
      print
    }' "${root}/config/prometheus/rules.yaml"
  echo '{{- end }}'
} >"${rules}"
if [[ -d "${root}/dist/chart/templates/hand-kept" ]]; then
  cp -R "${root}/dist/chart/templates/hand-kept" "${tmp}/dist/chart/templates/hand-kept"
fi
mkdir -p "${out}"
rm -rf "${out}/chart"
cp -R "${tmp}/dist/chart" "${out}/chart"
echo "${out}/chart regenerated from config/default"
