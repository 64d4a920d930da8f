{{- define "fn.name" -}}{{ .Chart.Name }}-{{ .Release.Name }}{{- end -}}
{{- define "fn.nested" -}}[{{ include "fn.name" . }}]{{- end -}}
{{- define "fn.req" -}}{{ required "mode is required" .Values.mode }}{{- end -}}
{{- define "fn.nil" -}}{{ .Values.nope.deep }}{{- end -}}
{{- define "fn.outer" -}}{{ include "fn.nil" . }}{{- end -}}
