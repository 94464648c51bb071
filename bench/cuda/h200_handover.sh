#!/usr/bin/env bash
# On the GPU machine (after bench/cuda/pack.sh here): the one-token hand-over between products
# (BRISK_CUDA_NQ, cuda_gemv.cu; bits: 1 the RMS norm's work done by the product before it, 2 the
# SwiGLU output's quantization done by the gate/up product) checked and timed against the kernels
# it leaves out:
#   1. the op test `handover` (the layer's chain against the CPU's ops) and the streamed products'
#      tests with the switch on, under a time limit each;
#   2. the tiny models end to end with BRISK_CUDA_NQ=3 (greedy tokens CUDA == CPU, graphs == eager);
#   3. tg128 of qwen3-8b, qwen3.6-27b and qwen3-30b-a3b (or the presets named: `bash h200_handover.sh
#      qwen3-8b`; Q4_K_M, --repeat-rows 256, the MoE with --expert-skew 1) with NQ 0 and 3 alternating
#      (1 and 2 too on the first), and the greedy text of 48 tokens (not bit for bit: the norm's scale
#      multiplies the row sums instead of the activations).
# MEMCHECK=1: compute-sanitizer's memcheck on the op test after.
set -u
d=/tmp/nq; . bench/cuda/device_env.sh
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
timeout 300 $B/tests/test_cuda_ops handover moe_handover 2>&1 | grep -E "^ok|^FAIL|differ|passed|  handover|  moe" | head -20
BRISK_CUDA_NQ=3 timeout 300 $B/tests/test_cuda_ops norm_matmul matmul_swiglu matmul_stream 2>&1 |
  grep -E "^ok|^FAIL|differ|passed" | head
M2=
for p in tiny-qwen3moe tiny-qwen35 tiny-qwen35moe tiny-qwen3next; do
  $A synth --preset $p -o $d/$p.gguf > /dev/null 2>&1 && M2="$M2 $d/$p.gguf"; done
BRISK_CUDA_NQ=3 BRISK_E2E_MODELS="${M2# }" BRISK_E2E_MODEL=.device/stories260K.gguf timeout 300 $B/tests/test_cuda_ops \
  end_to_end end_to_end_models 2>&1 | grep -E "^ok|^FAIL|differ|passed"
el ops
first=1
for P in ${*:-qwen3-8b qwen3.6-27b qwen3-30b-a3b}; do
  M=$d/$P.gguf
  $A synth --preset $P --vocab $d/vocab.gguf --type q4_k_m --repeat-rows 256 \
    $(case $P in *a3b) echo --expert-skew 1 ;; esac) -o $M 2>&1 | tail -1
  for v in 0 3 $([ $first = 1 ] && echo 1 2) 0 3; do
    echo "$P BRISK_CUDA_NQ=$v: $(BRISK_CUDA_NQ=$v $A bench -m $M -p 0 -n 128 -r 2 2>&1 | grep -E '^\| *tg')"
  done
  for v in 0 3; do
    echo "$P greedy NQ=$v: $(BRISK_CUDA_NQ=$v $A run -m $M -p 'Once upon a time' -n 48 --temp 0 --ignore-eos 2>/dev/null | md5sum)"
  done
  rm -f $M; el $P; first=0
done
if [ -n "${MEMCHECK:-}" ]; then ops_memcheck handover moe_handover; fi
