{{- define "order.x" -}}x from sub{{- end -}}
{{- define "order.y" -}}y from sub{{- end -}}
{{- define "order.w" -}}w from sub{{- end -}}
