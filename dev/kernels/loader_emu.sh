#!/bin/sh
# Cuts the integer-dot weight loaders out of src/backend/cuda/cuda_internal.cuh and checks on the
# CPU that the decode kernels' shared-byte loaders (group_load_q4k_pair, group_load_q6k_quad) give
# exactly the groups group_load<T> gives one by one, at every 2-byte alignment (group_load is what
# test-cuda holds against the CPU), and that Q6_K's two-instruction unpacking (q6_minus32) equals the
# saturating per-byte subtract it replaced on every 6-bit input. From the repository root; no GPU needed.
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
k += grab('template <int T, bool SH = false> __device__ __forceinline__ void group_load(')
k += grab('template <bool SH = false> __device__ __forceinline__ void group_load_q4k_pair(')
k += grab('template <bool SH = false> __device__ __forceinline__ void group_load_q6k_quad(')
open(sys.argv[1], 'w').write(k)
PY
g++ -std=c++17 -O1 -w -I"$out" -Isrc -Iinclude dev/kernels/loader_emu.cpp -o "$out/emu"
"$out/emu"
