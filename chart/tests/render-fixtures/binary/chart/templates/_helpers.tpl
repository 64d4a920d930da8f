{{- define "binary.blob" -}}
{{ .Files.Get "files/crds.yaml.bz2" }}
{{- end -}}
