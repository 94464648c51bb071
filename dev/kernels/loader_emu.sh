#!/bin/sh
# Cuts the integer-dot weight loaders out of src/backend/cuda/cuda_internal.cuh and checks on the
# CPU that the decode kernels' shared-byte loaders (group_load_q4k_pair, group_load_q5k_pair,
# group_load_q6k_quad) give exactly the groups group_load<T> gives one by one, at every 2-byte
# alignment (group_load is what test-cuda holds against the CPU), that the groups of Q5_K, IQ4_XS
# and IQ4_NL stand for exactly the weights the CPU's dequantization gives (a * w - b per weight),
# that the codebook lookup (iq4nl_lookup4) matches the table on every index, and that Q6_K's
# two-instruction unpacking (q6_minus32) equals the saturating per-byte subtract it replaced on
# every 6-bit input. From the repository root; no GPU needed.
set -e
out=${TMPDIR:-/tmp}/loader_emu
mkdir -p "$out"
python3 - "$out/loader_emu.inc" <<'PY'
import sys
s = open('src/backend/cuda/cuda_internal.cuh').read()
def grab(a, end='\n}\n'):
    i = s.index(a)
    return s[i:s.index(end, i) + len(end)]
k = grab('typedef struct wgroup {', '} wgroup;\n')
k += grab('template <bool SH, class V> __device__ __forceinline__ V ld_ro(')
k += grab('template <int NW, bool SH = false> __device__ __forceinline__ void ld_a2(')
k += grab('__device__ __forceinline__ int q6_minus32(')
k += grab('__device__ __forceinline__ void k4_sc_m(')
k += grab('__device__ __forceinline__ int iq4nl_lookup4(')
k += grab('template <int T, bool SH = false> __device__ __forceinline__ void group_load(')
k += grab('__device__ __forceinline__ void k4_pair_scales(')
k += grab('template <bool SH = false> __device__ __forceinline__ void group_load_q4k_pair(')
k += grab('template <bool SH = false> __device__ __forceinline__ void group_load_q5k_pair(')
k += grab('template <bool SH = false> __device__ __forceinline__ void group_load_q6k_quad(')
open(sys.argv[1], 'w').write(k)
PY
for f in quant/quant quant/quant_kquant quant/quant_iq quant/quant_iq_grids quant/quant_iq_search base/status; do
  gcc -std=c11 -O1 -w -D_GNU_SOURCE -Isrc -Iinclude -c src/$f.c -o "$out/$(basename $f).o"
done
g++ -std=c++17 -O1 -w -I"$out" -Isrc -Iinclude dev/kernels/loader_emu.cpp "$out/quant.o" "$out/quant_kquant.o" "$out/quant_iq.o" "$out/quant_iq_grids.o" "$out/quant_iq_search.o" \
  "$out/status.o" -lm -o "$out/emu"
"$out/emu"
