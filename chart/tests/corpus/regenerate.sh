#!/usr/bin/env bash
# Regenerates chart/tests/corpus/golden/<chart>/<values stem>.json from the real helm
# (v4.1.4, $HELM or the reference tools cache). For every chart of ../shared/charts and each
# of its values files, a copy of the chart gets one extra template (nested deepest, so it
# renders before any template can change .Values) that prints the
# coalesced .Values and the enabled subcharts (two levels) as JSON; `helm template` renders
# it with the corpus command line. Goldens come only from the real helm.
set -euo pipefail
HELM="${HELM:-$HOME/.cache/flotilla/reference-tools/helm}"
here="$(cd "$(dirname "$0")" && pwd)"
corpus="${CORPUS:-$here/../../../../shared/charts}"
out="$here/golden"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
deep=z/z/z/z/z/z/z/z/z/z/z/z
for dir in "$corpus"/*/; do
  name="$(basename "$dir")"
  [ -d "$dir/chart" ] || continue
  rm -rf "$tmp/chart" && cp -r "$dir/chart" "$tmp/chart"
  # Deepest template first in Helm's render order, so no other template has changed .Values.
  mkdir -p "$tmp/chart/templates/$deep"
  cat > "$tmp/chart/templates/$deep/values.yaml" <<'TPL'
{{- $subs := dict -}}
{{- range $k, $v := .Subcharts -}}{{- $_ := set $subs $k (keys $v.Subcharts | sortAlpha) -}}{{- end -}}
{{ dict "values" .Values "subcharts" $subs | toJson }}
TPL
  mkdir -p "$out/$name"
  for vf in "$dir"/values/*.yaml; do
    stem="$(basename "$vf" .yaml)"
    "$HELM" template "$name" "$tmp/chart" --namespace corpus -f "$vf" --kube-version 1.34.0 \
      --api-versions monitoring.coreos.com/v1 --api-versions networking.k8s.io/v1/Ingress \
      --api-versions autoscaling/v2 --api-versions policy/v1 \
      --show-only "templates/$deep/values.yaml" 2>/dev/null \
      | grep -v '^---$' | grep -v '^# Source:' > "$out/$name/$stem.json"
  done
done
