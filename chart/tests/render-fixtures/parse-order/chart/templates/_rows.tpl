{{- define "order.rows" }}
row-1: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-2: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-3: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-4: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-5: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-6: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-7: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-8: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-9: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-10: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-11: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-12: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-13: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-14: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-15: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-16: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-17: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-18: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-19: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
row-20: {{ if .Values.rows }}{{ range $i, $r := .Values.rows }}{{ $i }}={{ $r | toString | quote }},{{ end }}{{ else }}none{{ end }}
{{- end }}
