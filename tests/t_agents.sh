#!/usr/bin/env bash
# t_agents.sh — two coding agents, as their users run them, each complete a turn
# against `brisk serve`: OpenAI's Codex CLI (`codex exec` with a model provider
# whose wire_api is "responses": /v1/responses) and Anthropic's Claude Code
# (`claude -p` with ANTHROPIC_BASE_URL: /v1/messages), both from npm (make deps).
# Each sends its real system prompt and tool list (7-8K tokens), streams, and
# must exit 0 having printed the model's text, while brisk's access log shows
# its endpoint answered 200 and no request answered 4xx or 5xx. The server
# wants a key, which each agent sends as its users would (Codex: env_key;
# Claude Code: ANTHROPIC_AUTH_TOKEN).
#
# The model is brisk-kjv-6m (models/) with its end-of-sequence token moved to
# ".\n", the end of most verses: a base model trained on the Bible writes verse
# after verse, and an agent takes a turn cut by max_tokens for an error; this
# copy ends its answer with its first verse (a few dozen tokens). Neither agent
# may reach beyond loopback: their update checks, telemetry and model catalogs
# are switched off, and both run under a time limit.
set -u
BUILD=${BUILD:-build}
NPM=${BRISK_NPM:-$(pwd)/.deps/npm/node_modules}
CODEX=$NPM/@openai/codex/bin/codex.js
CLAUDE=$NPM/@anthropic-ai/claude-code/bin/claude.exe
AGENT_LIMIT=${AGENT_LIMIT:-120} # seconds each agent may take
if [ "${SAN:-0}" = 1 ]; then
  # sanitized kernels prefill some 30 tokens/s on two busy cores: the agents' prompts would take
  # minutes each; tests/server/{responses,anthropic}.mjs send requests of their shape under SAN=1
  echo "skip all: SAN=1 prefills the agents' 7-8K-token prompts too slowly"
  exit 77
fi
if ! command -v node >/dev/null || [ ! -f "$CODEX" ] || [ ! -x "$CLAUDE" ]; then
  echo "skip all: no node, or the @openai/codex and @anthropic-ai/claude-code npm packages (make deps) [required]"
  exit 77
fi
TMP=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

# the model: a copy whose tokenizer.ggml.eos_token_id (a u32 after its key) is the id of ".\n"
MODEL=$TMP/kjv.gguf
NL=$(printf '.\n' | "$BUILD/brisk" tokenize -m models/brisk-kjv-6m.gguf 2>/dev/null)
python3 - models/brisk-kjv-6m.gguf "$MODEL" "$NL" <<'EOF' || { echo "t_agents: cannot make the model"; exit 1; }
import struct, sys
src, dst, tok = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = bytearray(open(src, 'rb').read())
key = b'tokenizer.ggml.eos_token_id'
i = b.find(struct.pack('<Q', len(key)) + key) + 8 + len(key)
assert i > 8 + len(key) and struct.unpack_from('<I', b, i)[0] == 4  # GGUF's type u32
struct.pack_into('<I', b, i + 4, tok)
open(dst, 'wb').write(b)
EOF

# the server: one slot of 32K tokens (the trained 2048 stretched by YaRN; the agents' tools join the
# system prompt, as this template has no tools section: ~21K tokens for Claude Code), the name the agents give
export AGENT_KEY=agent-test-key
printf '%s\n' "$AGENT_KEY" >"$TMP/key"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
NAME=brisk-kjv
"$BUILD/brisk" serve -m "$MODEL" --port "$PORT" --alias "$NAME" --api-key-file "$TMP/key" -c 32768 --rope-scaling yarn --rope-scale 16 \
  --parallel 1 -t 2 >"$TMP/serve.log" 2>&1 &
PID=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 || { echo "t_agents: the server did not start"; cat "$TMP/serve.log"; exit 1; }
mkdir -p "$TMP/work" "$TMP/codex" "$TMP/home"
fail=0

# check NAME ENDPOINT RC: the agent exited 0, printed text, and its endpoint answered 200
check() {
  local name=$1 endpoint=$2 rc=$3
  if [ "$rc" -ne 0 ] || ! grep -q '[[:alpha:]]' "$TMP/$name.out" ||
    ! grep -q "\"POST $endpoint[?\"].* 200 " "$TMP/serve.log"; then
    echo "t_agents: $name failed (exit $rc)"
    tail -n 20 "$TMP/$name.out" "$TMP/$name.err"
    tail -n 10 "$TMP/serve.log"
    fail=1
  else
    echo "ok   $name: $(tr '\n' ' ' <"$TMP/$name.out" | cut -c1-100)"
  fi
}

# Codex CLI: a provider for brisk's Responses API, the key from AGENT_KEY; no retries (a failure shows at once)
cat >"$TMP/codex/config.toml" <<EOF
model = "$NAME"
model_provider = "brisk"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.brisk]
name = "brisk"
base_url = "http://127.0.0.1:$PORT/v1"
wire_api = "responses"
env_key = "AGENT_KEY"
request_max_retries = 0
stream_max_retries = 0
EOF
t0=$SECONDS
(cd "$TMP/work" && CODEX_HOME="$TMP/codex" timeout -k 5 "$AGENT_LIMIT" node "$CODEX" exec --skip-git-repo-check \
  --ephemeral --color never "Say hello." </dev/null >"$TMP/codex.out" 2>"$TMP/codex.err")
check codex /v1/responses $?
echo "codex: $((SECONDS - t0)) s"

# Claude Code: ANTHROPIC_BASE_URL at brisk with the key as a bearer token; no traffic beyond the API
t0=$SECONDS
(cd "$TMP/work" && HOME="$TMP/home" ANTHROPIC_BASE_URL="http://127.0.0.1:$PORT" ANTHROPIC_AUTH_TOKEN="$AGENT_KEY" \
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 \
  CLAUDE_CODE_MAX_OUTPUT_TOKENS=1024 timeout -k 5 "$AGENT_LIMIT" "$CLAUDE" -p --model "$NAME" "Say hello." \
  </dev/null >"$TMP/claude.out" 2>"$TMP/claude.err")
check claude /v1/messages $?
echo "claude: $((SECONDS - t0)) s"

# no request was refused or failed
if grep -E '^[^ ]+ "[A-Z]+ [^"]*" [45][0-9][0-9] ' "$TMP/serve.log"; then
  echo "t_agents: brisk answered an agent with an error"; fail=1
fi
kill -TERM "$PID"
wait "$PID" || { echo "t_agents: the server exited with $?"; tail -n 20 "$TMP/serve.log"; fail=1; }
PID=
if grep -q "ERROR: \(Address\|Leak\)Sanitizer\|runtime error" "$TMP/serve.log"; then tail -n 60 "$TMP/serve.log"; fail=1; fi
exit $fail
