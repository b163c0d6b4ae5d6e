#!/usr/bin/env bash
# docs/ops.md is what `kiln info --ops` prints from the op table: an op added, removed or changed
# without regenerating the reference fails here, with the command that regenerates it.
set -euo pipefail
kiln=$1 docs=$2
actual=$(mktemp)
trap 'rm -f "$actual"' EXIT
"$kiln" info --ops >"$actual"
if ! diff -u "$docs/ops.md" "$actual"; then
  echo "docs/ops.md differs from the op table: run  build/src/kiln/kiln info --ops > docs/ops.md" >&2
  exit 1
fi
grep -q '^| `matmul` | 2 | 1 |' "$actual"  # the table has its rows
