#!/usr/bin/env bash
# make bench: builds the Qwen3-0.6B-shaped synthetic models if missing, then runs
# bench/cpu_bench.py (brisk vs llama.cpp, alternating, same threads).
set -euo pipefail
BUILD=${BUILD:-build}
SHARED=${SHARED:-$(cd .. && pwd)/shared}
M=bench/models
mkdir -p $M
[ -f $M/qwen3-0.6b-bf16.gguf ] || $BUILD/brisk synth --preset qwen3-0.6b --vocab "$SHARED/data/llama.cpp-vocab/ggml-vocab-qwen2.gguf" --type bf16 -o $M/qwen3-0.6b-bf16.gguf
[ -f $M/qwen3-0.6b-q4_k_m.gguf ] || $BUILD/llamacpp-ref quantize $M/qwen3-0.6b-bf16.gguf $M/qwen3-0.6b-q4_k_m.gguf Q4_K_M
[ -f $M/qwen3-0.6b-q8_0.gguf ] || $BUILD/llamacpp-ref quantize $M/qwen3-0.6b-bf16.gguf $M/qwen3-0.6b-q8_0.gguf Q8_0
python3 bench/cpu_bench.py --build "$BUILD" --models $M/qwen3-0.6b-q4_k_m.gguf $M/qwen3-0.6b-q8_0.gguf $M/qwen3-0.6b-bf16.gguf "$@"
