#!/usr/bin/env bash
# t_server.sh — `brisk serve` against real clients: starts the server on a free
# port with stories260K, runs tests/server/*.mjs with the official `openai`
# npm client (make deps) and a short load run; then a tiny synthetic qwen3
# with the real Qwen3 chat template, a tiny qwen3 with the real Qwen3 tokenizer for
# /infill, a tiny hybrid (qwen35) for recurrent-state
# checkpoints, embeddings and rerank servers (tests/server/embeddings.mjs), and a
# server with --parallel 1 --queue 1 --api-key for 429 and auth. Each server is stopped with SIGTERM and must exit 0 (under SAN=1 with
# no leak report).
set -u
BUILD=${BUILD:-build}
SHARED=${SHARED:-$(cd .. && pwd)/shared}
MODEL=$SHARED/data/stories260K/stories260K.gguf
export BRISK_NPM=${BRISK_NPM:-$(pwd)/.deps/npm/node_modules}
[ -f "$MODEL" ] || { echo "t_server: $MODEL missing"; exit 1; }
command -v node >/dev/null || { echo "t_server: node missing"; exit 1; }
[ -f "$BRISK_NPM/openai/package.json" ] || { echo "t_server: the openai npm package is missing (make deps)"; exit 1; }
[ -f "$BRISK_NPM/@anthropic-ai/sdk/package.json" ] || { echo "t_server: the @anthropic-ai/sdk npm package is missing (make deps)"; exit 1; }
SERVER_FAIL=t_server:
. tests/server_lib.sh

# start NAME ARGS...: a server of $MODEL (serve_start); sets PORT and PID
start() {
  local name=$1; shift
  serve_start "$name" 100 -m "${MODEL}" -t 1 "$@"
}
stop() { serve_stop "$@"; }

fail=0
start main -c 2048 --parallel 4 --cors-origin https://ok.example --alias other-name || exit 1
export BRISK_URL=http://127.0.0.1:$PORT
for t in api errors security anthropic responses concurrency structured native; do
  node "tests/server/$t.mjs" || fail=1
done
LOAD_SECONDS=${LOAD_SECONDS:-3} LOAD_CLIENTS=${LOAD_CLIENTS:-8} LOAD_PID=$PID node tests/server/load.mjs || fail=1
# shutdown with requests in flight: they end, the server exits 0 with nothing leaked
for _ in 1 2; do
  curl -sN "$BRISK_URL/v1/completions" -H 'Content-Type: application/json' -d '{"prompt":"Once upon a time","max_tokens":1900,"ignore_eos":true,"stream":true}' \
    >/dev/null 2>&1 &
done
sleep 0.2
stop main || fail=1
wait
# the access log: one line per request with its status
grep -q '^127.0.0.1 "POST /v1/completions" 200 [0-9]* [0-9]*ms$' "$TMP/main.log" &&
  grep -q '"GET /nope" 404' "$TMP/main.log" || { echo "t_server: no access log lines"; tail -n 5 "$TMP/main.log"; fail=1; }

# slow clients (issue 33): thousands of dribbling sockets while /health and a
# completion still answer within 1 s; the request deadline closes them all
SLOW_CONNS=${SLOW_CONNS:-2000}
want=$((SLOW_CONNS + 400))
[ "$(ulimit -n)" -lt $want ] && ulimit -n $want 2>/dev/null
[ "$(ulimit -n)" -lt $want ] && SLOW_CONNS=$(( $(ulimit -n) - 400 )) && echo "t_server: fd limit $(ulimit -n): $SLOW_CONNS slow sockets"
start slow -c 512 --parallel 2 --timeout 5 --max-conns-per-ip 150 --no-access-log || exit 1
BRISK_URL=http://127.0.0.1:$PORT SLOW_CONNS=$SLOW_CONNS SLOW_TIMEOUT=5 SLOW_PER_IP=150 node tests/server/slow.mjs || fail=1
stop slow || fail=1

# keys: an empty one is refused at start; BRISK_API_KEY and --api-key-file
# work; beyond loopback without a key, a warning
"$BUILD/brisk" serve -m "$MODEL" --port 0 --api-key "" >"$TMP/empty.log" 2>&1
[ $? -eq 2 ] && grep -q "API key is empty" "$TMP/empty.log" || { echo "t_server: an empty --api-key was accepted"; fail=1; }
BRISK_API_KEY=envkey start envkey -c 256 --parallel 1 || exit 1
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/models")" = 401 ] &&
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer envkey' "http://127.0.0.1:$PORT/v1/models")" = 200 ] &&
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer ' "http://127.0.0.1:$PORT/v1/models")" = 401 ] ||
  { echo "t_server: BRISK_API_KEY not enforced"; fail=1; }
grep -q warning "$TMP/envkey.log" && { echo "t_server: a warning on loopback with a key"; fail=1; }
stop envkey || fail=1
PORT=$(free_port)
"$BUILD/brisk" serve -m "$MODEL" --host 0.0.0.0 --port "$PORT" -c 256 --parallel 1 >"$TMP/open.log" 2>&1 &
PID=$!; pids+=("$PID")
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
grep -q "warning: listening on 0.0.0.0 without an API key" "$TMP/open.log" || { echo "t_server: no warning for 0.0.0.0 without a key"; fail=1; }
stop open || fail=1

# a tiny synthetic qwen3 (Qwen's vocabulary) with the real Qwen3 chat template
QVOCAB=$SHARED/data/llama.cpp-vocab/ggml-vocab-qwen2.gguf
"$BUILD/brisk" synth --preset tiny-qwen3 --vocab "$QVOCAB" --type q8_0 -o "$TMP/qwen3.gguf" >/dev/null 2>&1 || { echo "t_server: synth failed"; exit 1; }
node -e 'const fs=require("fs"); fs.writeFileSync(process.argv[2], JSON.parse(fs.readFileSync(process.argv[1])).chat_template)' \
  "$SHARED/data/qwen3-tokenizer/tokenizer_config.json" "$TMP/qwen3.jinja"
MODEL=$TMP/qwen3.gguf start qwen3 -c 1024 --parallel 2 --chat-template "$TMP/qwen3.jinja" || exit 1
BRISK_URL=http://127.0.0.1:$PORT node tests/server/qwen3.mjs || fail=1
BRISK_URL=http://127.0.0.1:$PORT ANTH_THINKING=1 node tests/server/anthropic.mjs || fail=1
BRISK_URL=http://127.0.0.1:$PORT RESP_THINKING=1 node tests/server/responses.mjs || fail=1
BRISK_URL=http://127.0.0.1:$PORT node tests/server/structured.mjs || fail=1 # masks over a 151k vocabulary
stop qwen3 || fail=1
# the same model with the real Qwen3.5 template: XML tool calls (tests/server/qwen_xml.mjs)
MODEL=$TMP/qwen3.gguf start qwen35tmpl -c 1024 --parallel 1 --chat-template tests/data/chat_templates/qwen3.5.jinja || exit 1
BRISK_URL=http://127.0.0.1:$PORT node tests/server/qwen_xml.mjs || fail=1
stop qwen35tmpl || fail=1
# ... and our Qwen3-Coder-style template (XML calls, no <think>): calls without their <tool_call>
MODEL=$TMP/qwen3.gguf start codertmpl -c 1024 --parallel 1 --chat-template tests/data/chat_templates/qwen3-coder-mini.jinja ||
  exit 1
BRISK_URL=http://127.0.0.1:$PORT XML_CODER=1 node tests/server/qwen_xml.mjs || fail=1
stop codertmpl || fail=1

# /infill needs fill-in-the-middle tokens: a tiny qwen3 checkpoint with the real Qwen3 tokenizer
# (tests/convert_mkhf.py), converted (tests/server/infill.mjs)
python3 tests/convert_mkhf.py qwen3 "$TMP/fimhf" "$SHARED/data/qwen3-tokenizer" &&
  "$BUILD/brisk" convert "$TMP/fimhf" -o "$TMP/fim.gguf" --type q8_0 >/dev/null 2>&1 || { echo "t_server: fim model failed"; exit 1; }
MODEL=$TMP/fim.gguf start fim -c 1024 --parallel 1 || exit 1
BRISK_URL=http://127.0.0.1:$PORT node tests/server/infill.mjs || fail=1
stop fim || fail=1

# a tiny synthetic hybrid (qwen35: Gated DeltaNet; GPT-2's vocabulary and ChatML keep it
# small): recurrent-state checkpoints for prefix reuse, against a server without them (the
# same prompt chunks: --batch 16)
"$BUILD/brisk" synth --preset tiny-qwen35 --vocab "$SHARED/data/llama.cpp-vocab/ggml-vocab-gpt-2.gguf" --type q8_0 \
  -o "$TMP/qwen35.gguf" >/dev/null 2>&1 || { echo "t_server: synth qwen35 failed"; exit 1; }
MODEL=$TMP/qwen35.gguf start nockpt -c 1024 --parallel 2 --batch 16 --ctx-checkpoints 0 || exit 1
NOCKPT_PORT=$PORT NOCKPT_PID=$PID
MODEL=$TMP/qwen35.gguf start big -c 1024 --parallel 1 || exit 1
BIG_PORT=$PORT BIG_PID=$PID
MODEL=$TMP/qwen35.gguf start hybrid -c 1024 --parallel 2 --batch 16 || exit 1
BRISK_URL=http://127.0.0.1:$PORT BRISK_URL_NOCKPT=http://127.0.0.1:$NOCKPT_PORT BRISK_URL_BIG=http://127.0.0.1:$BIG_PORT \
  node tests/server/hybrid.mjs || fail=1
stop hybrid || fail=1
PID=$BIG_PID stop big || fail=1
PID=$NOCKPT_PID stop nockpt || fail=1

# embeddings (--embeddings, --pooling none, --reranking) against `brisk embed` on brisk-kjv-6m;
# the reranker is test_embeddings' yes/no-head copy of it
KJV=$(pwd)/models/brisk-kjv-6m.gguf
export EMB_BIN=$BUILD/brisk EMB_MODEL=$KJV
MODEL=$KJV start emb --embeddings --pooling mean -c 256 --parallel 3 --batch 64 || exit 1
BRISK_URL=http://127.0.0.1:$PORT EMB_MODE=mean node tests/server/embeddings.mjs || fail=1
stop emb || fail=1
MODEL=$KJV start late --embeddings --pooling none -c 256 --parallel 2 || exit 1
BRISK_URL=http://127.0.0.1:$PORT EMB_MODE=none node tests/server/embeddings.mjs || fail=1
stop late || fail=1
if BUILD=$BUILD "$BUILD/tests/test_embeddings" rank >"$TMP/rank.log" 2>&1; then
  cp "$BUILD/conformance/kjv-reranker.gguf" "$TMP/reranker.gguf"
  MODEL=$TMP/reranker.gguf start rank --reranking -c 256 --parallel 2 || exit 1
  BRISK_URL=http://127.0.0.1:$PORT EMB_MODE=rank EMB_MODEL=$TMP/reranker.gguf node tests/server/embeddings.mjs || fail=1
  stop rank || fail=1
else
  echo "t_server: test_embeddings rank failed"; cat "$TMP/rank.log"; fail=1
fi

printf 'sekrit\n' >"$TMP/key"
start queue -c 2048 --parallel 1 --queue 1 --api-key-file "$TMP/key" || exit 1
BRISK_URL=http://127.0.0.1:$PORT BRISK_KEY=sekrit BRISK_QUEUE_TEST=1 node tests/server/concurrency.mjs || fail=1
stop queue || fail=1
exit $fail
