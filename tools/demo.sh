#!/usr/bin/env bash
# make demo: runs the embedded default model, brisk's own brisk-kjv-6m (a 5.8M-parameter
# qwen3 trained on the King James Bible, models/README.md), greedy and sampled.
set -euo pipefail
BUILD=${1:-build}
MODEL=models/brisk-kjv-6m.gguf
("$BUILD/brisk" info --no-tensors "$MODEL" | head -n 12) || true
echo
echo "\$ brisk run -m $MODEL -p 'In the beginning God created' -n 64 --temp 0"
"$BUILD/brisk" run -m "$MODEL" -p "In the beginning God created" -n 64 --temp 0
echo
echo "\$ brisk run -m $MODEL -p 'And Jesus said unto them,' -n 64 --seed 7 --repeat-penalty 1.1"
"$BUILD/brisk" run -m "$MODEL" -p "And Jesus said unto them," -n 64 --seed 7 --repeat-penalty 1.1
