#!/usr/bin/env bash
# On the GPU machine (after bench/cuda/pack.sh here): brisk against llama.cpp v0.4.0's CUDA
# build, alternating in one run, on synthetic models; results under $OUT (or /tmp/h200).
#   bash bench/cuda/h200.sh [MODELS...]      MODELS: preset:type, default qwen3-8b:q4_k_m qwen3-8b:q8_0
#                                            qwen3-8b:bf16 (issue 4's three rows)
#   MOE_MODELS="preset@layers:type ..."      short rows (pp512, tg128) for the MoE / hybrid shapes, default
#                                            qwen3-30b-a3b@24, qwen3.6-35b-a3b@20, qwen3.6-27b@32 in q4_k_m
# Models are written with `brisk synth --repeat-rows 256` (seconds, not minutes; same shapes and types).
# Steps: llama.cpp builds in the background (about 4 minutes on 16 cores) while brisk's
# test-cuda runs and the models are synthesized; then per model: pp512/tg128 both engines,
# pp4096, tg128 at depth 8K and 32K, batched 8/32, then the server bench on the first model
# (brisk serve, and llama-server through --url), GPU memory of both at the same context.
set -u
OUT=${OUT:-/tmp/h200}; mkdir -p "$OUT"
d=/tmp/bm; L=/tmp/ll/b/bin; . bench/cuda/device_env.sh
MODELS=${*:-${MODELS:-qwen3-8b:q4_k_m qwen3-8b:q8_0 qwen3-8b:bf16}}
SD=${SERVER_DURATION:-12}; DR=${DEPTH_REPS:-2}   # server seconds per stream count, depth-row repetitions
MOE_MODELS=${MOE_MODELS-qwen3-30b-a3b@24:q4_k_m qwen3.6-35b-a3b@20:q4_k_m qwen3.6-27b@32:q4_k_m}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,power.draw --format=csv,noheader | tee "$OUT/smi.txt"
( mkdir -p /tmp/ll && cd /tmp/ll && tar xJf "$OLDPWD/.device/llsrc.tar.xz" &&
  cmake -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_CUDA_FA_ALL_QUANTS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/ll/cfg.log 2>&1 &&
  cmake --build b -j14 --target llama-bench llama-batched-bench llama-server > /tmp/ll/build.log 2>&1
  echo "llama.cpp build rc=$?" ) > "$OUT/llbuild.txt" 2>&1 & LB=$!
( MODEL=.device/stories260K.gguf BUILD=$B SHARED=/nonexistent timeout 300 bash .device/cuda_run.sh > "$OUT/testcuda.txt" 2>&1 ) & TC=$!
for m in $MODELS; do p=${m%%:*}; t=${m##*:}
  [ -f $d/$p-$t.gguf ] || $B/brisk synth --preset $p --vocab $d/vocab.gguf --type $t --repeat-rows 256 -o $d/$p-$t.gguf > /dev/null 2>&1
done
for m in $MOE_MODELS; do p=${m%%@*}; r=${m#*@}; nl=${r%%:*}; t=${m##*:}
  [ -f $d/$p-$nl-$t.gguf ] || $B/brisk synth --preset $p --layers $nl --vocab $d/vocab.gguf --type $t --repeat-rows 256 \
    $(case $p in *a3b) echo --expert-skew 1;; esac) -o $d/$p-$nl-$t.gguf > /dev/null 2>&1
done
wait $TC; tail -1 "$OUT/testcuda.txt"; wait $LB; cat "$OUT/llbuild.txt"
row() { echo "$*" >> "$OUT/bench.txt"; }
for m in $MODELS; do f=$d/${m%%:*}-${m##*:}.gguf
  row "=== $m"
  { $B/brisk bench -m $f -p 512 -n 128 -r 3 2>&1 | grep -E '^\| (pp|tg)|bandwidth|CUDA device'
    $B/brisk bench -m $f -p 4096 -n 0 -r 2 2>&1 | grep -E '^\| pp'
    [ -x $L/llama-bench ] && $L/llama-bench -m $f -p 512,4096 -n 128 -fa 1 -ngl 99 -r 3 2>&1 | grep -E '^\| [a-z]'
    for dd in 8192 32768; do $B/brisk bench -m $f -p 0 -n 128 -d $dd -c $((dd + 512)) -r $DR 2>&1 | grep -E '^\| tg'; done
    [ -x $L/llama-bench ] && $L/llama-bench -m $f -p 0 -n 128 -d 8192,32768 -fa 1 -ngl 99 -r $DR 2>&1 | grep -E '^\| [a-z]'
    for np in 8 32; do $B/brisk bench -m $f -p 0 -n 128 -np $np -r 2 2>&1 | grep -E '^\| tg'; done
    [ -x $L/llama-batched-bench ] && $L/llama-batched-bench -m $f -c 16384 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,8,32 -fa on -ngl 99 2>&1 | grep -E '^\|'
  } >> "$OUT/bench.txt" 2>&1
done
for m in $MOE_MODELS; do p=${m%%@*}; r=${m#*@}; nl=${r%%:*}; t=${m##*:}; f=$d/$p-$nl-$t.gguf
  row "=== $p ($nl layers) $t"
  { $B/brisk bench -m $f -p 512 -n 128 -r 2 2>&1 | grep -E '^\| (pp|tg)'
    [ -x $L/llama-bench ] && $L/llama-bench -m $f -p 512 -n 128 -fa 1 -ngl 99 -r 2 2>&1 | grep -E '^\| [a-z]'
  } >> "$OUT/bench.txt" 2>&1
done
f=$d/$(echo $MODELS | awk '{print $1}' | tr : -).gguf
row "=== server: brisk"
timeout 120 python3 bench/server_bench.py --brisk $B/brisk -m $f --streams 1 8 32 64 --duration $SD --max-tokens 128 2>&1 | grep -E '^\|' >> "$OUT/bench.txt"
if [ -x $L/llama-server ]; then
  row "=== server: llama.cpp"
  $L/llama-server -m $f -c 24576 -np 64 -ngl 99 -fa on --port 18080 > /tmp/lls.log 2>&1 & SP=$!
  for i in $(seq 90); do sleep 1; python3 -c "import urllib.request;urllib.request.urlopen('http://127.0.0.1:18080/health')" 2>/dev/null && break; done
  row "llama-server GPU memory in use: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
  timeout 120 python3 bench/server_bench.py --url http://127.0.0.1:18080 --streams 1 8 32 64 --duration $SD --max-tokens 128 2>&1 | grep -E '^\|' >> "$OUT/bench.txt"
  kill $SP; wait $SP 2>/dev/null
fi
$B/brisk serve -m $f -c 24576 --parallel 64 --port 18081 > /tmp/bs.log 2>&1 & SP=$!
for i in $(seq 60); do sleep 1; python3 -c "import urllib.request;urllib.request.urlopen('http://127.0.0.1:18081/health')" 2>/dev/null && break; done
row "brisk serve GPU memory in use: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"; kill $SP; wait $SP 2>/dev/null
cat "$OUT/bench.txt"
