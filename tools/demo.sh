#!/usr/bin/env bash
# make demo: writes the embedded default model (until brisk's own trained model
# lands, a small random-weight llama with a built-in byte vocabulary: its text
# is noise, the point is the whole path from file to streamed tokens) and runs it.
set -euo pipefail
BUILD=${1:-build}
MODEL="$BUILD/demo-tiny-llama.gguf"
[ -f "$MODEL" ] || "$BUILD/brisk" synth --preset tiny-llama --seed 7 -o "$MODEL"
("$BUILD/brisk" info --no-tensors "$MODEL" | head -n 16) || true
echo
echo "\$ brisk run -m $MODEL -p 'Once upon a time' -n 48 --temp 0"
"$BUILD/brisk" run -m "$MODEL" -p "Once upon a time" -n 48 --temp 0
