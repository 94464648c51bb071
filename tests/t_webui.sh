#!/usr/bin/env bash
# t_webui.sh — the web chat page of `brisk serve` (GET /) in headless Chromium:
# starts the server with stories260K and an API key on a free port, runs
# tests/webui/chat.mjs (playwright-core from make deps driving Debian's
# chromium), then stops the server with SIGTERM: it must exit 0 (under SAN=1
# with no sanitizer report). Screenshots land in $BUILD/webui*.png.
# Skips (exit 77, a skip tests/run.sh lists) when no chromium is installed;
# tools/setup.sh installs it.
set -u
BUILD=${BUILD:-build}
SHARED=${SHARED:-$(cd .. && pwd)/shared}
MODEL=$SHARED/data/stories260K/stories260K.gguf
export BRISK_NPM=${BRISK_NPM:-$(pwd)/.deps/npm/node_modules}
export CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$CHROMIUM" ]; then echo "skip all: chromium is not installed (tools/setup.sh)"; exit 77; fi
[ -f "$MODEL" ] || { echo "t_webui: $MODEL missing"; exit 1; }
command -v node >/dev/null || { echo "t_webui: node missing"; exit 1; }
[ -f "$BRISK_NPM/playwright-core/package.json" ] || { echo "t_webui: playwright-core is missing (make deps)"; exit 1; }
TMP=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BUILD/brisk" serve -m "$MODEL" --port "$PORT" -t 1 -c 4096 --parallel 2 --api-key sekrit >"$TMP/serve.log" 2>&1 &
PID=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 || { echo "t_webui: the server did not start"; cat "$TMP/serve.log"; exit 1; }

fail=0
BRISK_URL=http://127.0.0.1:$PORT BRISK_KEY=sekrit SHOTS=$BUILD timeout 120 node tests/webui/chat.mjs || fail=1
kill -TERM "$PID"
wait "$PID"; rc=$?
PID=
if [ $rc -ne 0 ] || grep -q "ERROR: \(Address\|Leak\)Sanitizer\|runtime error" "$TMP/serve.log"; then
  echo "t_webui: the server exited with $rc"; tail -n 60 "$TMP/serve.log"; fail=1
fi
exit $fail
