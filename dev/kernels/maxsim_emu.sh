#!/bin/sh
# Cuts the late-interaction kernels out of src/backend/cuda/cuda_maxsim.cu (its constants, the
# encoding, the prep, product and sum kernels) and runs them on the CPU against a double-precision
# MaxSim (dev/kernels/maxsim_emu.cpp). From the repository root; no GPU needed.
set -e
out=${TMPDIR:-/tmp}/maxsim_emu
mkdir -p "$out"
python3 - "$out/maxsim_emu.inc" <<'PY'
import sys
s = open('src/backend/cuda/cuda_maxsim.cu').read()
cut = lambda t, a, b: t[t.index(a):t.index(b, t.index(a))]
k = cut(s, '#define MS_THREADS', '/* Multiply-adds')
k += cut(s, '/* An f32 as an unsigned int', 'template <int TM>\nstatic void maxsim_launch')
open(sys.argv[1], 'w').write(k)
PY
g++ -std=c++20 -O2 -ffp-contract=off -fno-strict-aliasing -pthread -w -I"$out" dev/kernels/maxsim_emu.cpp -o "$out/emu"
"$out/emu"
