{{/* Labels of every object; `component` is added where a part owns the object. */}}
{{- define "rollboot.labels" -}}
app.kubernetes.io/name: rollboot
app.kubernetes.io/part-of: rollboot
{{- with .Values.extraLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "rollboot.controllerLabels" -}}
app.kubernetes.io/component: controller
{{ include "rollboot.labels" . }}
{{- end -}}

{{- define "rollboot.agentLabels" -}}
app.kubernetes.io/component: agent
{{ include "rollboot.labels" . }}
{{- end -}}
