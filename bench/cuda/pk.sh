#!/usr/bin/env bash
# On the GPU machine (after LAB=1 bash bench/cuda/pack.sh here): issue 30's persistent decode kernel
# (dev/kernels/pk_lab.cu) beside brisk's own decode on the same file, in one call:
#   bash bench/cuda/pk.sh                  qwen3-8b and qwen3-30b-a3b Q4_K_M (brisk synth --repeat-rows 256)
#   MODELS="qwen3-8b qwen3-0.6b" TYPE=q8_0 bash bench/cuda/pk.sh
# Per model: pk_lab's check (its logits against brisk's decode of the same tokens) and its step at
# depth 512 with the L2 prefetch on and off, slices of 32 / 64 / 128 KiB, 1 and 2 tokens a step (4 do not fit the
# shared memory with the 8b's 12,288-wide FFN input);
# then `brisk bench -p 0 -n 32 -d 512`. Results: $OUT/pk.txt. A time guard (LIMIT s) skips what is left.
set -u
OUT=${OUT:-/tmp/pk}; mkdir -p "$OUT"; d=/tmp/bm; LIMIT=${LIMIT:-420}
T0=$(date +%s); left() { [ $(( $(date +%s) - T0 )) -lt $LIMIT ]; }
. bench/cuda/device_env.sh
xz -dc .device/pk_lab.xz > /tmp/pk_lab && chmod +x /tmp/pk_lab
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/pk.txt"
# first the tiny f32 models (their f16 path; seconds): the machinery, before the big files
for p in tiny-qwen3 tiny-llama tiny-qwen3moe; do
  $A synth --preset $p -o $d/$p.gguf > /dev/null 2>&1
  echo "== $p pk_lab 1 8 64 1 16 / 3 8 64 1 16" | tee -a "$OUT/pk.txt"
  timeout 60 /tmp/pk_lab $d/$p.gguf 1 8 64 1 16 2>&1 | tail -3 | tee -a "$OUT/pk.txt"
  timeout 60 /tmp/pk_lab $d/$p.gguf 3 8 64 1 16 2>&1 | tail -3 | tee -a "$OUT/pk.txt"
done
for p in ${MODELS:-qwen3-8b qwen3-30b-a3b}; do f=$d/$p-${TYPE:-q4_k_m}.gguf
  [ -f $f ] || $A synth --preset $p --vocab $d/vocab.gguf --type ${TYPE:-q4_k_m} --repeat-rows 256 \
    $(case $p in *a3b) echo --expert-skew 1;; esac) -o $f > /dev/null
  for args in "1 64 512 1 64" "1 64 512 0 64" "1 64 512 1 32" "1 64 512 1 128" "2 32 512 1 64"; do
    left || break
    echo "== $p pk_lab n_tok steps depth prefetch slice_kb: $args" | tee -a "$OUT/pk.txt"
    timeout 120 /tmp/pk_lab $f $args 2>&1 | tail -4 | tee -a "$OUT/pk.txt"
  done
  left && $A bench -m $f -p 0 -n 32 -d 512 -r 2 2>/dev/null | grep -E '^\| tg' | sed "s/^/$p brisk /" | tee -a "$OUT/pk.txt"
done
