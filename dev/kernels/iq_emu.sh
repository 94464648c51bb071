#!/bin/sh
# Compiles the CUDA device code of the codebook, ternary and FP4 weight types
# (src/backend/cuda/cuda_iq.cuh) for the CPU and checks it against brisk's CPU decoders
# (dev/kernels/iq_emu.cpp): the same floats, bit for bit. From the repository root; no GPU needed.
set -e
out=${TMPDIR:-/tmp}/iq_emu
mkdir -p "$out"
for f in quant/quant quant/quant_kquant quant/quant_iq quant/quant_iq_grids quant/quant_iq_search base/status; do
  gcc -std=c11 -O1 -w -D_GNU_SOURCE -Isrc -Iinclude -c src/$f.c -o "$out/$(basename $f).o"
done
g++ -std=c++17 -O1 -ffp-contract=off -fno-strict-aliasing -w -Isrc -Iinclude dev/kernels/iq_emu.cpp \
  "$out/quant.o" "$out/quant_kquant.o" "$out/quant_iq.o" "$out/quant_iq_grids.o" "$out/quant_iq_search.o" "$out/status.o" -lm -o "$out/emu"
"$out/emu"
