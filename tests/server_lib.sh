# server_lib.sh — the servers of the `brisk serve` tests (t_server.sh, t_server_spec.sh): sourced,
# not run (tests/run.sh runs tests/t_*.sh only). Needs BUILD; SERVER_FAIL is the start of a
# failure's line ("t_server:", "FAIL"). Makes TMP (removed at exit, with every server still up
# killed), pids, free_port, serve_start and serve_stop.
TMP=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# serve_start NAME TRIES ARGS...: `brisk serve --port PORT ARGS...` in the background, its log in
# $TMP/NAME.log; waits for /health up to TRIES times 0.1 s (a server that exits stops the wait);
# sets PORT and PID
serve_start() {
  local name=$1 tries=$2; shift 2
  PORT=$(free_port)
  "$BUILD/brisk" serve --port "$PORT" "$@" >"$TMP/$name.log" 2>&1 &
  PID=$!
  pids+=("$PID")
  for _ in $(seq 1 "$tries"); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "$SERVER_FAIL $name did not start"; cat "$TMP/$name.log"; return 1
}

# serve_stop NAME: SIGTERM to PID, then its exit status must be 0 and its log clean (no sanitizer report)
serve_stop() {
  local name=$1 rc
  kill -TERM "$PID"
  wait "$PID"; rc=$?
  if [ $rc -ne 0 ] || grep -q "ERROR: \(Address\|Leak\)Sanitizer\|runtime error" "$TMP/$name.log"; then
    echo "$SERVER_FAIL $name exited with $rc"; tail -n 60 "$TMP/$name.log"; return 1
  fi
}
