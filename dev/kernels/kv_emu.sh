#!/bin/sh
# Cuts the quantized KV cache code out of src/backend/cuda/cuda_internal.cuh (kv_store, kvq_load8,
# kvq_cvt8) and cuda_attention.cu (kv_at) and checks it on the CPU against brisk's q8_0 and q4_0
# quantization and dequantization (dev/kernels/kv_emu.cpp): the same bytes, the same floats. From
# the repository root; no GPU needed.
set -e
out=${TMPDIR:-/tmp}/kv_emu
mkdir -p "$out"
python3 dev/kernels/emu_cut.py "$out/kv_emu.inc" \
  src/backend/cuda/cuda_internal.cuh 'enum { KT_F32 = 0' '/* One check macro:' \
  src/backend/cuda/cuda_internal.cuh 'template <int KT> __device__ __forceinline__ uint4 kvq_load8(' \
    '__constant__ static const int8_t bk_iq4nl' \
  src/backend/cuda/cuda_attention.cu 'template <int KT> __device__ __forceinline__ float kv_at(' '/* One block per (G query heads'
for f in quant/quant quant/quant_kquant quant/quant_iq quant/quant_iq_grids quant/quant_iq_search base/status; do
  gcc -std=c11 -O1 -w -D_GNU_SOURCE -Isrc -Iinclude -c src/$f.c -o "$out/$(basename $f).o"
done
g++ -std=c++20 -O1 -ffp-contract=off -fno-strict-aliasing -pthread -w -I"$out" -Isrc -Iinclude dev/kernels/kv_emu.cpp \
  "$out/quant.o" "$out/quant_kquant.o" "$out/quant_iq.o" "$out/quant_iq_grids.o" "$out/quant_iq_search.o" "$out/status.o" -lm -o "$out/emu"
"$out/emu"
