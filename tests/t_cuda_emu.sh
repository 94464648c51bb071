#!/usr/bin/env bash
# The CUDA decode kernels' weight loaders, cut out of src/backend/cuda/cuda_internal.cuh and
# compiled for the CPU: the shared-byte ones (Q6_K quads, Q4_K and Q5_K pairs) give bit for bit the
# groups that group_load<T> (held against the CPU by make test-cuda) gives one by one, and the
# groups of Q5_K, IQ4_XS and IQ4_NL stand for exactly the CPU's dequantized weights. Then the
# quantized KV cache's code (kv_store's q8_0 and q4_0 warp quantization, run lane by lane, and the
# kernels' readers) against the CPU's quantization: the same bytes, the same floats. Last the
# decoders of the codebook, ternary and FP4 types (cuda_iq.cuh: iq_deq8, iq_group_load) against the
# CPU's quant_dequantize, bit for bit. No GPU needed.
set -eu
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
out=$(TMPDIR=$d sh dev/kernels/loader_emu.sh 2>&1)
echo "$out"
printf '%s\n' "$out" | grep -q '^[0-9][0-9]* groups compared, 0 mismatches$'
out=$(TMPDIR=$d sh dev/kernels/kv_emu.sh 2>&1)
echo "$out"
printf '%s\n' "$out" | grep -q '^[0-9][0-9]* kv blocks and 8-value groups compared, 0 mismatches$'
out=$(TMPDIR=$d sh dev/kernels/iq_emu.sh 2>&1)
echo "$out"
printf '%s\n' "$out" | grep -q '^[0-9][0-9]* iq groups compared, 0 mismatches$'
