{{/*
The environment that points the in-cluster client of the manager and the gateway at the API server given by
.Values.kubernetesService (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, which client-go's in-cluster
configuration reads), as env list items; empty when kubernetesService.host is empty, and the kubelet's values
(the kubernetes Service's ClusterIP and port) stay. For clusters where that Service does not reach the API
server: no kube-proxy, pods on the host's network (values.yaml: hostNetwork).
*/}}
{{- define "actionledger.kubernetesServiceEnv" -}}
{{- with .Values.kubernetesService }}
{{- if .host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ .host | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ .port | default 443 | quote }}
{{- end }}
{{- end }}
{{- end }}
