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
# (.Values.finalizerPolicy.enabled, .Values.requestedByPolicy.enabled, .Values.hmacPayloadPolicy.enabled) and the cluster serves
# admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes 1.36+), so the chart still installs on
# older clusters, where the manager adds the finalizer itself and requested-by is what the creator wrote. The
# plugin cannot express the condition: it is added here.
for policy in externalaction-finalizer:finalizerPolicy externalaction-requested-by:requestedByPolicy destination-hmac-payload:hmacPayloadPolicy; do
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
IMG="${img}" awk '$0 == "        image: controller:latest" { print "        image: " ENVIRON["IMG"]; next } { print }' "${gw}" >"${gw}.tmp"
mv "${gw}.tmp" "${gw}"
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
