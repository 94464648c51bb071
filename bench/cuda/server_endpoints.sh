#!/usr/bin/env bash
# On the GPU machine (after bench/cuda/pack.sh here): issue 33's table of the agent endpoints'
# overhead, brisk serve beside llama.cpp v0.4.0's llama-server (built here, CUDA, -fa on) on the same
# synthetic file: bench/server_bench.py over /v1/completions, /v1/chat/completions, /v1/responses
# and /v1/messages at 1 and 32 streams (tokens/s and time to first token).
#   bash bench/cuda/server_endpoints.sh          results in $OUT/endpoints_{brisk,llama}.txt
# MODEL=qwen3-8b (a brisk synth preset, Q4_K_M), STREAMS="1 32", DUR=8 seconds a row, PROMPT=512,
# GEN=128 tokens. llama-server's build (~5 min on 16 cores) runs in the background while brisk's rows run.
set -u
OUT=${OUT:-/tmp/endpoints}; mkdir -p "$OUT"
d=/tmp/bm; . bench/cuda/device_env.sh
P=${MODEL:-qwen3-8b}; M=$d/$P.gguf; L=/tmp/ll/b/bin/llama-server
STREAMS=${STREAMS:-1 32}; PROMPT=${PROMPT:-512}; GEN=${GEN:-128}
if [ ! -x $L ]; then
  ( mkdir -p /tmp/ll && cd /tmp/ll && tar xJf "$OLDPWD/.device/llsrc.tar.xz" &&
    cmake -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_CUDA_FA_ALL_QUANTS=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
      -DGGML_CCACHE=OFF -DCMAKE_BUILD_TYPE=Release > cfg.log 2>&1 && cmake --build b -j12 --target llama-server > build.log 2>&1
    echo "rc=$?" > /tmp/ll/server_done ) > /dev/null 2>&1 < /dev/null &
fi
[ -f $M ] || $A synth --preset $P --vocab $d/vocab.gguf --type q4_k_m --repeat-rows 256 \
  $(case $P in *a3b) echo --expert-skew 1;; esac) -o $M > /dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/smi.txt"
SB="--streams $STREAMS --duration ${DUR:-8} --prompt $PROMPT --max-tokens $GEN --endpoint completions chat responses messages"
python3 bench/server_bench.py --brisk $A -m $M --ngl 99 $SB 2> "$OUT/endpoints_brisk.err" | tee "$OUT/endpoints_brisk.txt"
for i in $(seq 300); do [ -x $L ] || [ -f /tmp/ll/server_done ] || { sleep 2; continue; }; break; done
if [ -x $L ]; then
  np=$(echo $STREAMS | tr ' ' '\n' | sort -n | tail -1)
  $L -m $M -ngl 99 -np $np -c $((np * (PROMPT + GEN + 192))) -fa on --port 18090 > "$OUT/llama-server.log" 2>&1 & LP=$!
  for i in $(seq 300); do curl -sf localhost:18090/health > /dev/null && break; sleep 1; done
  python3 bench/server_bench.py --url http://127.0.0.1:18090 $SB 2> "$OUT/endpoints_llama.err" | tee "$OUT/endpoints_llama.txt"
  kill $LP 2>/dev/null; wait $LP 2>/dev/null
else
  echo "llama-server did not build: $(tail -n 3 /tmp/ll/build.log 2>/dev/null)" | tee "$OUT/endpoints_llama.txt"
fi
