#!/usr/bin/env bash
# On the GPU machine (after bench/cuda/pack.sh here): the Gated DeltaNet launch fusions of branch
# exp/conv-fuse checked and timed. The op tests (bit for bit against the unfused ops), the tiny hybrid
# models end to end, then qwen3.6-27b and qwen3.6-35b-a3b (Q4_K_M, --repeat-rows 256): tg128 with each
# fusion on and off (BRISK_CUDA_CONV_FUSE, BRISK_CUDA_GD_FUSE) and the greedy text of 48 tokens, fused
# against unfused (must be equal: the same arithmetic).
set -u
rm -rf .device/build; tar xJf .device/bin.tar.xz -C .device
B=.device/build; A=$B/brisk; export LD_LIBRARY_PATH=$PWD/.device/lib
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
d=/tmp/fz; mkdir -p $d; xz -dc .device/vocab.gguf.xz > $d/vocab.gguf
M2=
for p in tiny-qwen35 tiny-qwen35moe tiny-qwen3next; do $A synth --preset $p -o $d/$p.gguf > /dev/null 2>&1 && M2="$M2 $d/$p.gguf"; done
BRISK_E2E_MODELS="${M2# }" BRISK_E2E_MODEL=.device/stories260K.gguf $B/tests/test_cuda_ops ssm end_to_end_models 2>&1 | tail -6
el ops
for P in qwen3.6-27b qwen3.6-35b-a3b; do
  M=$d/$P.gguf
  $A synth --preset $P --vocab $d/vocab.gguf --type q4_k_m --repeat-rows 256 $([ $P = qwen3.6-35b-a3b ] && echo --expert-skew 1) -o $M 2>&1 | tail -1
  BRISK_CUDA_GRAPH_INFO=1 $A bench -m $M -p 0 -n 4 -r 1 2>&1 | grep "graph:" | sort | uniq -c
  for v in "C=1 G=1" "C=0 G=0" "C=1 G=0" "C=0 G=1" "C=1 G=1" "C=0 G=0"; do
    set -- $v; c=${1#C=}; g=${2#G=}
    echo "$P conv_fuse=$c gd_fuse=$g: $(BRISK_CUDA_CONV_FUSE=$c BRISK_CUDA_GD_FUSE=$g $A bench -m $M -p 0 -n 128 -r 2 2>&1 | grep -E '^\| *tg')"
  done
  a=$($A run -m $M -p "Once upon a time" -n 48 --temp 0 --ignore-eos 2>/dev/null | md5sum)
  b=$(BRISK_CUDA_CONV_FUSE=0 BRISK_CUDA_GD_FUSE=0 $A run -m $M -p "Once upon a time" -n 48 --temp 0 --ignore-eos 2>/dev/null | md5sum)
  echo "$P greedy 48 tokens fused / unfused: $a / $b $([ "$a" = "$b" ] && echo SAME || echo DIFFER)"
  rm -f $M; el $P
done
