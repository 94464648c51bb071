#!/usr/bin/env bash
# On the GPU machine (after bench/cuda/pack.sh here): the decode attention's merge of many splits
# for a whole head group at once (BRISK_CUDA_ATTN_WMERGE=1, cuda_attn_decode.cu's dec_combine_wide)
# against the head-by-head merge, and BRISK_CUDA_ATTN_BPS=3 (the splits one wave of three blocks per
# SM): the attention op tests with the switch on, then tg64 of qwen3-8b (Q4_K_M, --repeat-rows 256)
# at depth 8K and 32K with the switches alternating (and tg128 at depth 0 with
# BRISK_CUDA_ATTN_MINCHUNK=256 against the default 128), and the greedy text of 32 tokens
# after a 9,000-token prompt either way (not bit for bit: the merge adds in another order).
#   bash bench/cuda/h200_wmerge.sh [PRESET...]      default qwen3-8b
# MEMCHECK=1: compute-sanitizer's memcheck on the op test after.
set -u
d=/tmp/wm; . bench/cuda/device_env.sh
timeout 300 $B/tests/test_cuda_ops attention_wmerge 2>&1 | grep -E "^ok|^FAIL|differ|passed" | head
for P in ${*:-qwen3-8b}; do
  M=$d/$P.gguf
  $A synth --preset $P --vocab $d/vocab.gguf --type q4_k_m --repeat-rows 256 \
    $(case $P in *a3b) echo --expert-skew 1 ;; esac) -o $M 2>&1 | tail -1
  # at short depth: one split up to 256 positions (no merge for the whole of tg128) against 128
  for v in X=1 BRISK_CUDA_ATTN_MINCHUNK=256 X=1 BRISK_CUDA_ATTN_MINCHUNK=256; do
    echo "$P tg128 $v: $(env $v $A bench -m $M -p 0 -n 128 -r 2 2>&1 | grep -E '^\| *tg')"
  done
  for dd in 8192 32768; do
    for v in X=1 BRISK_CUDA_ATTN_WMERGE=1 BRISK_CUDA_ATTN_BPS=3 BRISK_CUDA_ATTN_WMERGE=1,BRISK_CUDA_ATTN_BPS=3 X=1 \
      BRISK_CUDA_ATTN_WMERGE=1,BRISK_CUDA_ATTN_BPS=3; do
      echo "$P depth $dd $v: $(env ${v//,/ } $A bench -m $M -p 0 -n 64 -d $dd -c $((dd + 512)) -r 1 2>&1 |
        grep -E '^\| *tg')"
    done
  done
  python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog'] * 1000))" > $d/long.txt
  for v in 0 1; do
    echo "$P greedy after 9K WMERGE=$v: $(BRISK_CUDA_ATTN_WMERGE=$v $A run -m $M -f $d/long.txt -n 32 -c 12288 \
      --temp 0 --ignore-eos 2>/dev/null | tail -c 400 | md5sum)"
  done
  rm -f $M
done
if [ -n "${MEMCHECK:-}" ]; then ops_memcheck attention_wmerge; fi
