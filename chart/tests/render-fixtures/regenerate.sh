#!/usr/bin/env bash
# Regenerates the goldens of every render fixture with the real helm (v4.1.4):
#   HELM=/path/to/helm chart/tests/render-fixtures/regenerate.sh
# Each <area>/cases.txt line is "STEM RELEASE [helm template flags...]"; the command runs
# from <area>/ as `helm template RELEASE chart/ FLAGS`, writing golden/STEM.stdout,
# golden/STEM.stderr and golden/STEM.code (the exit status).
set -euo pipefail
HELM="${HELM:-$HOME/.cache/flotilla/reference-tools/helm}"
cd "$(dirname "$0")"
for area in */; do
  area="${area%/}"
  [ -f "$area/cases.txt" ] || continue
  rm -rf "$area/golden"
  mkdir -p "$area/golden"
  while read -r stem name args; do
    [ -n "$stem" ] || continue
    # shellcheck disable=SC2086
    (cd "$area" && set +e; "$HELM" template "$name" chart/ $args >"golden/$stem.stdout" 2>"golden/$stem.stderr"; echo $? >"golden/$stem.code")
  done <"$area/cases.txt"
done
