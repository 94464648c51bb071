#!/usr/bin/env bash
# t_server_load.sh — issue 6's load test: 64 concurrent streaming clients for
# 2 minutes against `brisk serve --parallel 64` on stories260K. Every request
# must complete (no error, no non-2xx) and the server's RSS must stay flat
# after warm-up (within LOAD_RSS_SLACK_MB). Override with LOAD_SECONDS /
# LOAD_CLIENTS.
set -u
BUILD=${BUILD:-build}
SHARED=${SHARED:-$(cd .. && pwd)/shared}
MODEL=$SHARED/data/stories260K/stories260K.gguf
export BRISK_NPM=${BRISK_NPM:-$(pwd)/.deps/npm/node_modules}
[ -f "$MODEL" ] || { echo "t_server_load: $MODEL missing"; exit 1; }
[ -f "$BRISK_NPM/openai/package.json" ] || { echo "t_server_load: the openai npm package is missing (make deps)"; exit 1; }
secs=${LOAD_SECONDS:-120}; slack=${LOAD_RSS_SLACK_MB:-16}
# Under SAN=1: 20 s, and no RSS bound (ASan's quarantine keeps freed memory
# resident by design); the leak check at shutdown stands in for it there.
[ "${SAN:-0}" = 1 ] && secs=${LOAD_SECONDS:-20} && slack=${LOAD_RSS_SLACK_MB:-100000}
TMP=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BUILD/brisk" serve -m "$MODEL" --port "$PORT" -c 512 --parallel 64 -t 2 >"$TMP/log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
BRISK_URL=http://127.0.0.1:$PORT LOAD_CLIENTS=${LOAD_CLIENTS:-64} LOAD_SECONDS=$secs LOAD_MAX_TOKENS=128 \
  LOAD_RSS_SLACK_MB=$slack LOAD_PID=$PID node tests/server/load.mjs; rc=$?
kill -TERM $PID; wait $PID; src=$?
if [ $src -ne 0 ] || grep -q "ERROR: \(Address\|Leak\)Sanitizer\|runtime error" "$TMP/log"; then
  echo "t_server_load: server exited with $src"; tail -n 40 "$TMP/log"; exit 1
fi
exit $rc
