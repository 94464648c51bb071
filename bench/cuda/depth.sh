#!/usr/bin/env bash
# On the GPU machine (after bench/cuda/pack.sh here): issue 28's depth table, brisk beside
# llama.cpp v0.4.0's CUDA build (-fa 1) on the same synthetic Q4_K_M files, in one run, and the
# decode attention's A/B (BRISK_CUDA_DISABLE=attn_mma: the warp-per-row kernel).
#   STEP=prep bash bench/cuda/depth.sh    llama.cpp build (beside the rest, its log in /tmp/ll; waited for at
#                                         the end: a device call's background processes end with the call,
#                                         and the build takes 6-7 minutes on 16 cores), the models,
#                                         test_cuda_ops' attention cases (MEMCHECK=1: under memcheck too),
#                                         dev/kernels/attn_lab.cu when packed (LAB=1 bash bench/cuda/pack.sh)
#   STEP=run ROWS="model:depth[:kv] ..." bash bench/cuda/depth.sh
#                                         per row: brisk tg32 at that depth (default kernel, then
#                                         AB=1 the warp kernel), llama-bench; TTFT=1: both engines' pp of a
#                                         prompt of the depth's length (time to first token = depth / pp),
#                                         llama.cpp's from one llama-batched-bench run that also gives its
#                                         tg32 right after that prompt (at the depth: one prefill, not two)
# Models (brisk synth --repeat-rows 256, full layer counts): qwen3-8b, qwen3.6-27b, qwen3.6-35b-a3b
# (--expert-skew 1). KV=q8_0 etc. sets both engines' cache type; BLANK=1 gives brisk the depth as
# blank cache rows (brisk bench --blank-depth: no prefill, so 262K-1M rows take seconds; llama.cpp
# has no such option, so its rows still prefill); a row's own :kv overrides KV. BRISK=0: llama.cpp's rows
# only; LLAMA=0: brisk's only. Results: $OUT/depth.txt.
set -u
OUT=${OUT:-/tmp/depth}; mkdir -p "$OUT"
d=/tmp/bm; L=/tmp/ll/b/bin; . bench/cuda/device_env.sh
KV=${KV:-f16}; N=${NGEN:-32}
row() { echo "$*" | tee -a "$OUT/depth.txt"; }
if [ "${STEP:-prep}" = prep ]; then
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,power.draw --format=csv,noheader | tee "$OUT/smi.txt"
  if [ ! -x $L/llama-bench ]; then
    ( mkdir -p /tmp/ll && cd /tmp/ll && tar xJf "$OLDPWD/.device/llsrc.tar.xz" &&
      cmake -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_CUDA_FA_ALL_QUANTS=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/ll/cfg.log 2>&1 &&
      cmake --build b -j12 --target llama-bench llama-batched-bench > /tmp/ll/build.log 2>&1
      echo "llama.cpp build rc=$?" > /tmp/ll/done ) > /dev/null 2>&1 < /dev/null &
  fi
  for p in ${MODELS:-qwen3-8b qwen3.6-27b qwen3.6-35b-a3b}; do
    [ -f $d/$p.gguf ] || $B/brisk synth --preset $p --vocab $d/vocab.gguf --type q4_k_m --repeat-rows 256 \
      $(case $p in *a3b) echo --expert-skew 1;; esac) -o $d/$p.gguf > /dev/null 2>&1 &
  done
  [ "${OPS:-1}" = 1 ] && $B/tests/test_cuda_ops attention 2>&1 | tail -4 | tee "$OUT/ops.txt" # (OPS=0: not here)
  if [ -f .device/attn_lab.xz ] && [ "${LAB:-1}" = 1 ]; then # (LAB=1 bash bench/cuda/pack.sh; LAB=0 here: not now) every shape and depth
    xz -dc .device/attn_lab.xz > /tmp/attn_lab && chmod +x /tmp/attn_lab && /tmp/attn_lab | tee "$OUT/attn_lab.txt"
  fi
  [ -n "${MEMCHECK:-}" ] && ops_memcheck attention_depth | tee -a "$OUT/ops.txt"
  wait; ls -la $d | tee -a "$OUT/ops.txt"; cat /tmp/ll/done 2>/dev/null | tee -a "$OUT/ops.txt"
  exit 0
fi
for r in ${ROWS:-qwen3-8b:32768}; do IFS=: read -r p dd kv <<< "$r"; f=$d/$p.gguf; KV=${kv:-${KV0:=$KV}}
  row "=== $p at depth $dd, KV $KV ($(nvidia-smi --query-gpu=name --format=csv,noheader))"
  for v in $([ "${BRISK:-1}" = 1 ] && echo default) ${AB:+warp}; do
    env $([ $v = warp ] && echo BRISK_CUDA_DISABLE=attn_mma) $B/brisk bench -m $f -p 0 -n $N -d $dd -r ${REPS:-2} --kv-type $KV ${BLANK:+--blank-depth} \
      2> "$OUT/err.txt" | grep -E '^\| tg' | sed "s/^/$v /" | tee -a "$OUT/depth.txt"
    grep -E "once for|rror" "$OUT/err.txt" | tee -a "$OUT/depth.txt"
  done
  if [ "${LLAMA:-1}" = 1 ] && { [ -z "${TTFT:-}" ] || [ "$dd" = 0 ]; }; then
    [ -x $L/llama-bench ] && $L/llama-bench -m $f -p 0 -n $N -d $dd -fa 1 -ngl 99 -r 1 -ctk $KV -ctv $KV 2>&1 |
      grep -E '^\| [a-z]' | tee -a "$OUT/depth.txt"
  fi
  if [ -n "${TTFT:-}" ] && [ "$dd" -gt 0 ]; then # time to first token of a dd-token prompt, both at default batches
    [ "${BRISK:-1}" = 1 ] && $B/brisk bench -m $f -p $dd -n 0 -r 1 --kv-type $KV 2> "$OUT/err.txt" |
      grep -E '^\| pp' | sed 's/^/ttft /' | tee -a "$OUT/depth.txt"
    # (T_PP: the prompt's time to first token; S_TG: tg32 after it, at the depth; -b 2048 -ub 512 as llama-bench)
    [ "${LLAMA:-1}" = 1 ] && [ -x $L/llama-batched-bench ] && $L/llama-batched-bench -m $f -c $((dd + N + 16)) \
      -npp $dd -ntg $N -npl 1 -fa on -ngl 99 -ctk $KV -ctv $KV 2>&1 | grep -E '^\|' | sed 's/^/ttft+tg /' |
      tee -a "$OUT/depth.txt"
  fi
done
