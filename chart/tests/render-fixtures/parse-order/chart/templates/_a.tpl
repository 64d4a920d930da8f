{{- define "order.x" -}}x from root _a.tpl{{- end -}}
{{- define "order.z" -}}{{- /* empty: keeps an earlier body */ -}}{{- end -}}
