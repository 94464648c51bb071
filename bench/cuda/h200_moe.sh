#!/usr/bin/env bash
# On the GPU machine (after bench/cuda/pack.sh here): the whole MoE and hybrid models of issue 5 and
# qwen3-8b, brisk beside llama.cpp v0.4.0's CUDA build in one run, and expert offload at two GPU
# budgets beside llama.cpp's --n-cpu-moe, with the peak GPU memory of each (nvidia-smi every 0.3 s).
# Results under $OUT (or /tmp/h200moe). Session 16's table in bench/RESULTS.md came from these steps
# (its lease A ran them from a git-ignored script, with the calibration of session 15; this file has
# not yet run as a whole).
#   bash bench/cuda/h200_moe.sh                 STATS=FILE: calibration counts for qwen3.6-35b-a3b
#                                               (default: made here by `brisk calibrate` on CALIB_TEXT)
# Models: `brisk synth --repeat-rows 256 --type q4_k_m`, MoE routers skewed by --expert-skew 1 (router
# rows scaled by (rank+1)^-1/4). One model on disk at a time (the machine has 64 GiB of disk).
# Steps: llama.cpp builds in the background (~150 s on 13 cores) while brisk's test-cuda runs.
set -u
OUT=${OUT:-/tmp/h200moe}; mkdir -p "$OUT"
d=/tmp/bm; L=/tmp/ll/b/bin; . bench/cuda/device_env.sh
A=$B/brisk
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,power.draw --format=csv,noheader | tee "$OUT/smi.txt"
( mkdir -p /tmp/ll && cd /tmp/ll && tar xJf "$OLDPWD/.device/llsrc.tar.xz" &&
  cmake -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_CUDA_FA_ALL_QUANTS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/ll/cfg.log 2>&1 &&
  nice cmake --build b -j13 --target llama-bench > /tmp/ll/build.log 2>&1
  echo "llama.cpp build rc=$?" ) > "$OUT/llbuild.txt" 2>&1 & LB=$!
( MODEL=.device/stories260K.gguf BUILD=$B SHARED=/nonexistent timeout 400 bash .device/cuda_run.sh > "$OUT/testcuda.txt" 2>&1 )
el "test-cuda: $(grep -E 'passed' "$OUT/testcuda.txt" | tr '\n' ' ')"
# t CMD...: the command's table rows; peak CMD...: the same, with the GPU memory's peak while it ran
t() { echo "-- $*"; "$@" 2>&1 | grep -E "^\| *(tg|pp)|^\| (all|[0-9]+ )|expert cache: [0-9]|^\| [a-z]" | grep -v "^| model"; }
peak() {
  echo 0 > /tmp/peak
  ( m=0; while sleep 0.3; do u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
      [ "$u" -gt "$m" ] && m=$u && echo $m > /tmp/peak; done ) & PK=$!
  "$@"; kill $PK; wait $PK 2>/dev/null; echo "   peak nvidia-smi MiB: $(cat /tmp/peak)"
}
synth() { # preset [extra flags]
  local p=$1; shift
  $A synth --preset $p --vocab $d/vocab.gguf --type q4_k_m --repeat-rows 256 "$@" -o $d/$p.gguf 2>&1 | tail -1
}
{
P=qwen3.6-35b-a3b; M=$d/$P.gguf
synth $P --expert-skew 1
STATS=${STATS:-}
if [ -z "$STATS" ]; then
  STATS=$d/stats.json
  cat ${CALIB_TEXT:-README.md bench/RESULTS.md} > $d/calib.txt
  $A calibrate -m $M -f $d/calib.txt -o $STATS -c 512 --chunks 16 2>&1 | tail -1
fi
S="--expert-stats $STATS --cache-experts auto"
t $A bench -m $M -p 512 -n 128 -r 3
peak t $A bench -m $M -p 0 -n 128 -r 3 --gpu-mem 16G $S
peak t $A bench -m $M -p 0 -n 128 -r 3 --gpu-mem 14.6G $S
t $A bench -m $M -p 512 -n 0 -r 2 --gpu-mem 16G $S
wait $LB; cat "$OUT/llbuild.txt"; el llama.cpp built
if [ -x $L/llama-bench ]; then
  t $L/llama-bench -m $M -p 512 -n 128 -fa 1 -ngl 99 -r 3
  for n in 12 10; do peak t $L/llama-bench -m $M -p 512 -n 128 -fa 1 -ngl 99 -ncmoe $n -r 2; done
fi
rm -f $M; el $P
for P in qwen3-8b qwen3.6-27b qwen3-30b-a3b; do
  M=$d/$P.gguf; R=3; [ $P = qwen3.6-27b ] && R=2
  synth $P $([ $P = qwen3-30b-a3b ] && echo --expert-skew 1)
  t $A bench -m $M -p 512 -n 128 -r $R
  [ -x $L/llama-bench ] && t $L/llama-bench -m $M -p 512 -n 128 -fa 1 -ngl 99 -r $R
  rm -f $M; el $P
done
} 2>&1 | tee "$OUT/bench.txt"
