#!/usr/bin/env bash
# On the GPU machine (after bench/cuda/pack.sh here): one token's products on Q5_K, IQ4_XS and
# IQ4_NL weights through the integer-dot kernels against the float path they replaced
# (BRISK_CUDA_DISABLE=dec_qtypes): the op tests of those types, then tg128 of qwen3-8b in each mix
# (`brisk synth --preset qwen3-8b --vocab ggml-vocab-qwen2.gguf --type T --repeat-rows 256`), with
# the greedy text of 48 tokens either way (not bit for bit: int8 activations against floats).
#   bash bench/cuda/h200_qtypes.sh [MIX...]      default q5_k_m iq4_xs iq4_nl
# AB=VAR=VALUE: the switch to alternate instead (h200_float.sh: BRISK_CUDA_ENABLE=mmvf); OPS="CASES":
# the op tests to run first instead ("": none). The low-bit types' int8 decode products (branch
# lab/iq-dec: cuda_mmvq_iq.cu) against their float GEMV, on that branch's build:
#   AB=BRISK_CUDA_ENABLE=dec_iq OPS=_iq bash bench/cuda/h200_qtypes.sh iq3_s iq3_m tq2_0 nvfp4 q2_0
# MEMCHECK=1: compute-sanitizer's memcheck on the streamed products' op test after.
set -u
d=/tmp/qt; . bench/cuda/device_env.sh
AB=${AB:-BRISK_CUDA_DISABLE=dec_qtypes}
OPS=${OPS-matmul matmul_stream matmul_multi}
[ -n "$OPS" ] && timeout 300 $B/tests/test_cuda_ops $OPS 2>&1 | grep -E "^ok|^FAIL|differ|passed" | head
for T in ${*:-q5_k_m iq4_xs iq4_nl}; do
  M=$d/qwen3-8b-$T.gguf
  $A synth --preset qwen3-8b --vocab $d/vocab.gguf --type $T --repeat-rows 256 -o $M 2>&1 | tail -1
  for v in X=1 $AB X=1 $AB; do
    echo "qwen3-8b $T $v: $(env $v $A bench -m $M -p 0 -n 128 -r 2 2>&1 | grep -E '^\| *tg')"
  done
  for v in X=1 $AB; do
    echo "qwen3-8b $T greedy $v: $(env $v $A run -m $M -p 'Once upon a time' -n 48 --temp 0 --ignore-eos 2>/dev/null | md5sum)"
  done
  rm -f $M
done
if [ -n "${MEMCHECK:-}" ]; then ops_memcheck matmul_stream; fi
