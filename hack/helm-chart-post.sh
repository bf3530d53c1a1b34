#!/usr/bin/env bash
# helm-chart-post.sh CHART_DIR finishes what kubebuilder's helm/v2-alpha plugin generates from config/default
# with what the plugin cannot express: the finalizer admission policy and its binding (config/admission) are
# rendered only when .Values.finalizerPolicy.enabled and the cluster serves admissionregistration.k8s.io/v1
# MutatingAdmissionPolicy (Kubernetes 1.36+), so the chart still installs on older clusters, where the manager
# adds the finalizer itself. `make helm-chart` and test/integration/ecosystem/helm_test.go both run it.
set -euo pipefail
chart=${1:?usage: helm-chart-post.sh CHART_DIR}
cond='{{- if and .Values.finalizerPolicy.enabled (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy") }}'
for f in "${chart}/templates/extras/externalaction-finalizer.yaml" "${chart}/templates/extras/externalaction-finalizer-binding.yaml"; do
  [[ -f "${f}" ]] || { echo "helm-chart-post.sh: ${f} is missing (did config/admission change?)" >&2; exit 1; }
  { echo "${cond}"; cat "${f}"; echo '{{- end }}'; } >"${f}.tmp"
  mv "${f}.tmp" "${f}"
done
