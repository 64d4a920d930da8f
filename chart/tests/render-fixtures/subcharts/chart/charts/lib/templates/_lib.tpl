{{- define "lib.label" -}}lib-of-{{ .Chart.Name }}{{- end -}}
