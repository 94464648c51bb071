#!/usr/bin/env bash
# On the GPU machine (after `LAB=1 bash bench/cuda/pack.sh` here): one token's products on float
# weights streamed (cuda_mmvf.cu, BRISK_CUDA_DISABLE=mmvf) against the float GEMV they replace:
#   1. the op tests (matmul_float_stream: F16, BF16, F32 on the streamed kernel; matmul, matmul_swiglu,
#      matmul_multi on the default), under a time limit each;
#   2. the lab (.device/mmvf_lab.xz): the decode shapes of qwen3-8b and qwen3.6-27b, us and % of the
#      copy bandwidth, both kernels;
#   3. tg128 of qwen3-8b in each float type with the switch alternating and the greedy text of 48
#      tokens either way (not bit for bit: the sums run in another order): h200_qtypes.sh's loop.
#   bash bench/cuda/h200_float.sh [TYPE...]      default bf16 f16
# MEMCHECK=1: compute-sanitizer's memcheck on the streamed kernel's op test after.
set -u
d=/tmp/fl; . bench/cuda/device_env.sh
timeout 300 $B/tests/test_cuda_ops matmul_float_stream 2>&1 | grep -E "^ok|^FAIL|differ|passed|  matmul" | head -40
timeout 300 $B/tests/test_cuda_ops matmul matmul_swiglu matmul_multi 2>&1 | grep -E "^ok|^FAIL|differ|passed" | head
if [ -f .device/mmvf_lab.xz ]; then
  xz -dc .device/mmvf_lab.xz > /tmp/mmvf_lab && chmod +x /tmp/mmvf_lab && timeout 240 /tmp/mmvf_lab 2>&1 | tail -20
fi
AB=BRISK_CUDA_DISABLE=mmvf OPS= MEMCHECK= bash bench/cuda/h200_qtypes.sh ${*:-bf16 f16}
if [ -n "${MEMCHECK:-}" ]; then ops_memcheck matmul_float_stream; fi
