#!/usr/bin/env bash
# Packs what a GPU-machine benchmark run needs into .device/ (git-ignored; the device
# tool carries it: carry [".device"]). Run here, after `make`:
#   bash bench/cuda/pack.sh [BUILD]
# .device/bin.tar.xz: build/{brisk,tests/{test_cuda_ops,test_pp,test_expert_cache,test_mtp,test_eagle3}} stripped, in one
# xz -9 archive (its 64 MiB window shares the four binaries' common code: ~3 MB against ~100 MB,
# which with the tracked files would pass the device tool's 64 MiB limit; the scripts on the GPU
# machine unpack it into .device/build); .device/lib: libmicrohttpd + libcjson
# (the GPU machine lacks them); .device/llsrc.tar.xz: llama.cpp v0.4.0's sources from the
# git bundle in node-llama-cpp@3.21.1 (built there, never committed here);
# .device/vocab.gguf.xz: the Qwen2 vocabulary for `brisk synth`; with LAB=1, .device/mmvs_lab.xz,
# .device/mmvf_lab.xz, .device/attn_lab.xz and .device/pk_lab.xz (dev/kernels/*_lab.cu, stripped).
set -euo pipefail
B=${1:-build}
S=${SHARED:-$(cd .. && pwd)/shared}
D=.device
mkdir -p $D/lib
BINS="brisk tests/test_cuda_ops tests/test_pp tests/test_expert_cache tests/test_mtp tests/test_eagle3"
make -s BUILD="$B" $(for f in $BINS; do echo "$B/$f"; done) # (test_cuda_ops is not part of `make`)
t=$(mktemp -d); mkdir -p "$t/build/tests"
for f in $BINS; do strip -o "$t/build/$f" "$B/$f"; done
if [ -n "${TRACE:-}" ]; then # TRACE=1: brisk's trace build too, as build/brisk-trace (cuda_trace.cuh)
  make -s BUILD="$B-trace" EXTRA_NVCCFLAGS=-DBK_TRACE "$B-trace/brisk"
  strip -o "$t/build/brisk-trace" "$B-trace/brisk"
fi
XZ_OPT="-9 -T2" tar cJf $D/bin.tar.xz -C "$t" build
rm -rf "$t" $D/build
cp tests/cuda/run.sh $D/cuda_run.sh
if [ -n "${LAB:-}" ]; then # LAB=1: the one-token product lab too (h200_fusions.sh runs it when there)
  ${NVCC:-nvcc} -std=c++17 -O3 -arch=sm_90a -Iinclude -Isrc dev/kernels/mmvs_lab.cu "$B/libbrisk.a" -o "$B/mmvs_lab" \
    -lpcre2-8 -lcjson -lmicrohttpd -ldl
  strip -o $D/mmvs_lab "$B/mmvs_lab" && xz -T2 -9 -f $D/mmvs_lab # (.device/mmvs_lab.xz: 14 MB stripped)
  ${NVCC:-nvcc} -std=c++17 -O3 -arch=sm_90a -Iinclude -Isrc dev/kernels/mmvf_lab.cu "$B/libbrisk.a" -o "$B/mmvf_lab" \
    -lpcre2-8 -lcjson -lmicrohttpd -ldl
  strip -o $D/mmvf_lab "$B/mmvf_lab" && xz -T2 -9 -f $D/mmvf_lab # the float-weight products' lab
  ${NVCC:-nvcc} -std=c++17 -O3 -arch=sm_90a -Iinclude -Isrc dev/kernels/attn_lab.cu "$B/libbrisk.a" -o "$B/attn_lab" \
    -lpcre2-8 -lcjson -lmicrohttpd -ldl
  strip -o $D/attn_lab "$B/attn_lab" && xz -T2 -9 -f $D/attn_lab # the decode attention at depth (bench/cuda/depth.sh)
  ${NVCC:-nvcc} -std=c++17 -O3 -arch=sm_90a -Iinclude -Isrc -Idev/kernels dev/kernels/pk_lab.cu dev/kernels/pk_plan.c \
    "$B/libbrisk.a" -o "$B/pk_lab" -lpcre2-8 -lcjson -lmicrohttpd -lcurl -ldl
  strip -o $D/pk_lab "$B/pk_lab" && xz -T2 -9 -f $D/pk_lab # issue 30's persistent decode kernel (pk_lab MODEL [n_tok])
else
  rm -f $D/mmvs_lab $D/mmvs_lab.xz $D/mmvf_lab $D/mmvf_lab.xz $D/attn_lab.xz $D/pk_lab.xz
fi
if [ ! -f $D/lib/libmicrohttpd.so.12 ] || [ ! -f $D/lib/libcjson.so.1 ]; then
  t=$(mktemp -d)
  (cd "$t" && apt-get download libmicrohttpd12 libcjson1 >/dev/null 2>&1)
  for deb in "$t"/*.deb; do dpkg -x "$deb" "$t/x"; done
  cp -L "$t"/x/usr/lib/x86_64-linux-gnu/libmicrohttpd.so.12 "$t"/x/usr/lib/x86_64-linux-gnu/libcjson.so.1 $D/lib/
  rm -rf "$t"
fi
if [ ! -f $D/llsrc.tar.xz ]; then
  bundle=.deps/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle
  t=$(mktemp -d)
  git clone -q "$bundle" "$t/src"
  ex=""; for b in sycl vulkan opencl hexagon cann metal webgpu zdnn musa openvino zendnn; do ex="$ex --exclude=ggml/src/ggml-$b"; done
  tar cJf $D/llsrc.tar.xz -C "$t/src" $ex CMakeLists.txt cmake common ggml include src tools vendor scripts licenses LICENSE
  rm -rf "$t"
fi
[ -f $D/vocab.gguf.xz ] || xz -T2 -c "$S/data/llama.cpp-vocab/ggml-vocab-qwen2.gguf" > $D/vocab.gguf.xz
[ -f $D/stories260K.gguf ] || cp "$S/data/stories260K/stories260K.gguf" $D/
# (prefill_ub.sh's perplexity; head's early exit gives zcat a SIGPIPE, which pipefail would make fatal)
[ -f $D/kjv.txt ] || { zcat "$S/data/corpus/kjv_verses.txt.gz" | head -c 300000 > $D/kjv.txt || [ -s $D/kjv.txt ]; }
du -sh $D
