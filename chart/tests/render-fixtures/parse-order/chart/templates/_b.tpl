{{- define "order.x" -}}x from root _b.tpl{{- end -}}
{{- define "order.y" -}}y from root _b.tpl{{- end -}}
{{- define "order.z" -}}z from root _b.tpl{{- end -}}
