#!/usr/bin/env bash
# On the GPU machine (after `TRACE=1 bash bench/cuda/pack.sh` here): one decode step's timeline
# from inside its kernels (src/backend/cuda/cuda_trace.cuh), per model, with the knobs named in
# KNOBS (each run once with the defaults, then once per knob), read by bench/cuda/trace_step.py.
#   bash bench/cuda/h200_trace.sh [PRESET...]      default qwen3-8b qwen3.6-27b qwen3-30b-a3b
# Models: `brisk synth --preset P --vocab ggml-vocab-qwen2.gguf --type q4_k_m --repeat-rows 256`
# (the MoE presets with --expert-skew 1). The raw records go to $OUT (xz) when it is set.
set -u
d=/tmp/tr; . bench/cuda/device_env.sh
[ -x $B/brisk-trace ] || { echo "no build/brisk-trace in .device/bin.tar.xz: pack with TRACE=1"; exit 1; }
O=${OUT:-/tmp/tr}
for P in ${*:-qwen3-8b qwen3.6-27b qwen3-30b-a3b}; do
  M=$d/$P.gguf
  $B/brisk synth --preset $P --vocab $d/vocab.gguf --type q4_k_m --repeat-rows 256 \
    $(case $P in *a3b) echo --expert-skew 1 ;; esac) -o $M 2>&1 | tail -1
  for v in X=1 ${KNOBS:-}; do
    f=$O/trace-$P-${v%%=*}.txt
    echo "=== $P $v: $(env $v BRISK_CUDA_TRACE=$f $B/brisk-trace bench -m $M -p 0 -n 64 -r 1 2>&1 | grep -E '^\| *tg|TRACE')"
    python3 bench/cuda/trace_step.py $f --rows ${ROWS:-40}
    xz -T4 -f $f
  done
  rm -f $M
done
