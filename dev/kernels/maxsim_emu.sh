#!/bin/sh
# Cuts the late-interaction kernels out of src/backend/cuda/cuda_maxsim.cu (its constants, the
# encoding, the prep, product and sum kernels) and runs them on the CPU against a double-precision
# MaxSim (dev/kernels/maxsim_emu.cpp). From the repository root; no GPU needed.
set -e
out=${TMPDIR:-/tmp}/maxsim_emu
mkdir -p "$out"
python3 dev/kernels/emu_cut.py "$out/maxsim_emu.inc" \
  src/backend/cuda/cuda_maxsim.cu '#define MS_THREADS' '/* Multiply-adds' \
  src/backend/cuda/cuda_maxsim.cu '/* An f32 as an unsigned int' 'template <int TM>
static void maxsim_launch'
g++ -std=c++20 -O2 -ffp-contract=off -fno-strict-aliasing -pthread -w -I"$out" dev/kernels/maxsim_emu.cpp -o "$out/emu"
"$out/emu"
