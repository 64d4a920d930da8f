{{- define "par.labels" -}}
app: {{ .Values.labels.app }}
tier: {{ .Values.labels.tier }}
template: {{ .Template.Name }}
{{- end -}}
{{- define "par.row" -}}
{{- range $i, $x := .Values.items }}
  row{{ $i }}: {{ printf "%s-%d" $x $i | quote }}
{{- end }}
{{- end -}}
