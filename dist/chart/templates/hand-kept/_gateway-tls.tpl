{{/*
The name of the gateway's serving Secret: .Values.gateway.tls.secretName, default <release>-gateway-tls.
*/}}
{{- define "actionledger.gatewayTLSSecretName" -}}
{{- $tls := .Values.gateway.tls | default dict }}
{{- $tls.secretName | default (include "actionledger.resourceName" (dict "suffix" "gateway-tls" "context" .)) }}
{{- end }}
