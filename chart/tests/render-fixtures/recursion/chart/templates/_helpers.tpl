{{- /* Counts down through nested includes: each level is one more template call on the stack. */ -}}
{{- define "recursion.down" -}}
{{- if gt (int .n) 0 -}}
{{- include "recursion.down" (dict "n" (sub (int .n) 1) "acc" (add1 .acc)) -}}
{{- else -}}
{{- .acc -}}
{{- end -}}
{{- end -}}
{{- define "recursion.forever" -}}
{{- include "recursion.forever" . -}}
{{- end -}}
