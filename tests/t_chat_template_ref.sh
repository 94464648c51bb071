#!/usr/bin/env bash
# Re-renders every pair of tests/data/chat_templates/cases.txt with
# @huggingface/jinja (tests/chat_template/ref.mjs) and compares with the
# committed expected/ files, which test_chat_template compares brisk against:
# a fixture that drifted from the reference fails here. Skipped (exit 77) when
# node or .deps/npm/node_modules/@huggingface/jinja is missing, which make test
# must have: the skip is [required], so tests/run.sh fails over it.
set -u
SHARED=${SHARED:-$(cd .. && pwd)/shared}
if ! command -v node >/dev/null || [ ! -f .deps/npm/node_modules/@huggingface/jinja/dist/index.js ]; then
  echo "skip all: no node or no .deps/npm/node_modules/@huggingface/jinja (make deps) [required]"; exit 77
fi
dir=tests/data/chat_templates
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp "$dir/cases.txt" "$tmp/" && cp -r "$dir/vars" "$tmp/" && cp "$dir"/*.jinja "$tmp/"
node tests/chat_template/ref.mjs --gen "$tmp" "$SHARED" >/dev/null || { echo "ref.mjs failed"; exit 1; }
fail=0
for f in "$tmp"/expected/*.expected; do
  if ! cmp -s "$f" "$dir/expected/$(basename "$f")"; then
    echo "differs from the reference: $dir/expected/$(basename "$f")"; fail=$((fail + 1))
  fi
done
n=$(ls "$tmp"/expected | wc -l)
echo "$n reference renders, $fail differ"
[ "$fail" -eq 0 ] && [ "$n" -ge 100 ]
