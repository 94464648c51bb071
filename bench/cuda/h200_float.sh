#!/usr/bin/env bash
# On the GPU machine (after `LAB=1 bash bench/cuda/pack.sh` here): one token's products on float
# weights streamed (cuda_mmvf.cu, BRISK_CUDA_MMVF=1) against the float GEMV they replace:
#   1. the op tests (matmul_float_stream: F16, BF16, F32 on the streamed kernel; matmul, matmul_swiglu,
#      matmul_multi on the default), under a time limit each;
#   2. the lab (.device/mmvf_lab.xz): the decode shapes of qwen3-8b and qwen3.6-27b, us and % of the
#      copy bandwidth, both kernels;
#   3. tg128 of qwen3-8b in each float type (`brisk synth --preset qwen3-8b --vocab ggml-vocab-qwen2.gguf
#      --type T --repeat-rows 256`), the knob alternating, and the greedy text of 48 tokens either way
#      (not bit for bit: the sums run in another order).
#   bash bench/cuda/h200_float.sh [TYPE...]      default bf16 f16
# MEMCHECK=1: compute-sanitizer's memcheck on the streamed kernel's op test after.
set -u
d=/tmp/fl; . bench/cuda/device_env.sh
timeout 300 $B/tests/test_cuda_ops matmul_float_stream 2>&1 | grep -E "^ok|^FAIL|differ|passed|  matmul" | head -40
timeout 300 $B/tests/test_cuda_ops matmul matmul_swiglu matmul_multi 2>&1 | grep -E "^ok|^FAIL|differ|passed" | head
if [ -f .device/mmvf_lab.xz ]; then
  xz -dc .device/mmvf_lab.xz > /tmp/mmvf_lab && chmod +x /tmp/mmvf_lab && timeout 240 /tmp/mmvf_lab 2>&1 | tail -20
fi
for T in ${*:-bf16 f16}; do
  M=$d/qwen3-8b-$T.gguf
  $A synth --preset qwen3-8b --vocab $d/vocab.gguf --type $T --repeat-rows 256 -o $M 2>&1 | tail -1
  for v in X=1 BRISK_CUDA_MMVF=1 X=1 BRISK_CUDA_MMVF=1; do
    echo "qwen3-8b $T $v: $(env $v $A bench -m $M -p 0 -n 128 -r 2 2>&1 | grep -E '^\| *tg')"
  done
  for v in X=1 BRISK_CUDA_MMVF=1; do
    echo "qwen3-8b $T greedy $v: $(env $v $A run -m $M -p 'Once upon a time' -n 48 --temp 0 --ignore-eos 2>/dev/null | md5sum)"
  done
  rm -f $M
done
if [ -n "${MEMCHECK:-}" ]; then
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  timeout 240 $CS --tool memcheck $B/tests/test_cuda_ops matmul_float_stream 2>&1 | tail -3
fi
