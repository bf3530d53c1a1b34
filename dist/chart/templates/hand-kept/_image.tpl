{{/*
The image of the manager, the gateway and the uninstall hook (they run one binary): manager.image.repository, then
@manager.image.digest when set (what make release writes: the kubelet pulls exactly that image), else
:manager.image.tag (default the chart's appVersion). A repository that holds a digest itself is used as it is.
*/}}
{{- define "actionledger.image" -}}
{{- $img := .Values.manager.image -}}
{{- $repo := $img.repository | default "controller" -}}
{{- if contains "@" $repo -}}
{{- $repo -}}
{{- else if $img.digest -}}
{{- printf "%s@%s" $repo $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo ($img.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end }}
