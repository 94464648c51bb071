#!/bin/sh
# Cuts the Gated DeltaNet kernels out of src/backend/cuda/cuda_ssm.cu and runs
# them on the CPU (dev/kernels/gated_delta_emu.cpp). From the repository root.
set -e
out=${TMPDIR:-/tmp}/gated_delta_emu
mkdir -p "$out"
python3 - "$out/gated_delta_emu.inc" <<'PY'
import sys
s = open('src/backend/cuda/cuda_ssm.cu').read()
cut = lambda a, b: s[s.index(a):s.index(b)]
k = cut('#define CONV_THREADS', '/* The entries\' sequences on the device')
k += cut('/* ---- ssm_conv: one thread per channel', 'extern "C" void cuda_ssm_conv(')
k += cut('/* ---- gated_delta: warp = (head, state row)', '/* The chunked form for the batch')
h = open('src/backend/cuda/cuda_internal.cuh').read()
a = h.index('__device__ __forceinline__ double warp_sum_d(')
k = h[a:h.index('\n}\n', a) + 3] + k  # shared with the norms since it moved there
k = k.replace('extern __shared__ __align__(16) unsigned char gdc_raw[];', 'unsigned char *gdc_raw = g_dyn;')
open(sys.argv[1], 'w').write(k)
PY
g++ -std=c++20 -O1 -ffp-contract=off -pthread -w -I"$out" dev/kernels/gated_delta_emu.cpp -o "$out/emu"
"$out/emu"
