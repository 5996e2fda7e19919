#!/bin/sh
# Refreshes crates/bridge-ledger/data/prices.json, the price snapshot the bridge uses when
# opencode's own models cache (~/.cache/opencode/models.json) is missing: every model of
# models.dev that has a price, reduced to its `cost` (USD per million tokens) and release date
# (the newest Sonnet is the default compare model), stamped with
# today's date and the source. Needs curl and jq. Review the diff before committing.
set -eu
out="$(dirname "$0")/../crates/bridge-ledger/data/prices.json"
src="https://models.dev/api.json"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
curl -fsSL "$src" >"$tmp"
jq --arg date "$(date -u +%F)" --arg src "$src" '
  with_entries(select(.value | type == "object" and has("models")))
  | map_values({models: (.models | with_entries(select(.value.cost != null)
      | .value = ({release_date: .value.release_date, cost: (.value.cost
      | {input, output, cache_read, cache_write}
      | with_entries(select(.value != null)))} | with_entries(select(.value != null)))))})
  | {_snapshot: {date: $date, source: ($src + " (list prices in USD per million tokens)")}} + .
' "$tmp" >"$out.new"
mv "$out.new" "$out"
echo "wrote $out"
