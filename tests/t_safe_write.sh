#!/usr/bin/env bash
# No command destroys data (issue 35): every command that writes a file the user
# names (quantize, convert, synth, calibrate -o, perplexity --kl-divergence-base)
#  - refuses an output that is one of its inputs (the same path, a symlink or a
#    hard link to it) in one line, and the input keeps every byte;
#  - on a write that fails part way (a file size limit of 0: every write gets
#    EFBIG) leaves an existing output byte-identical and no OUT.tmp.XXXXXX;
#  - replaces by rename, so quantizing another model onto the file that a running
#    `brisk serve` has mapped leaves the server alive, answering as before (it
#    used to die of SIGBUS, exit 135, when quantize truncated the file in place).
# The file-level guarantees (modes, symlinks, signals, a mapping that outlives the
# rename) are tests/test_atomic_file.c's.
set -u
B=${BUILD:-build}/brisk
S=${SHARED:-../shared}/data
K=models/brisk-kjv-6m.gguf           # the issue's x.gguf: 11,686,816 bytes
M=$S/stories260K/stories260K.gguf
MOE=models/brisk-kjv-moe.gguf
T=$(mktemp -d)
spid=
trap '[ -n "$spid" ] && kill "$spid" 2>/dev/null; rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
no() { echo "FAIL $*"; fail=1; }
leftovers() { find "$T" -name '*.tmp.*' -o -name '*.scratch.*'; }

# refused WHAT FILE CMD...: CMD fails in one line naming FILE as an input, FILE keeps its bytes
refused() {
  local what=$1 f=$2 rc; shift 2
  cp "$f" "$T/before"
  "$@" >/dev/null 2>"$T/e"; rc=$?
  if [ $rc -ne 0 ] && [ "$(wc -l <"$T/e")" -eq 1 ] && grep -q "is the input file" "$T/e" && cmp -s "$f" "$T/before" &&
     [ -z "$(leftovers)" ]; then ok "$what: $(cat "$T/e")"
  else no "$what: rc $rc, stderr: $(cat "$T/e"), leftovers: $(leftovers)"; fi
}

# failwrite WHAT OUT CMD...: OUT holds old bytes; CMD runs where no file may grow (ulimit -f 0, SIGXFSZ
# ignored so a write gets EFBIG); it fails in one line, OUT keeps its bytes, no temporary file is left
failwrite() {
  local what=$1 f=$2 rc; shift 2
  echo "an older file at $f" >"$f"; cp "$f" "$T/before"
  ( trap '' XFSZ; ulimit -f 0; exec "$@" 2>&1 >/dev/null ) | tail -n 1 >"$T/e"; rc=${PIPESTATUS[0]}
  if [ $rc -ne 0 ] && [ -s "$T/e" ] && cmp -s "$f" "$T/before" && [ -z "$(leftovers)" ]; then ok "$what: $(cat "$T/e")"
  else no "$what: rc $rc, stderr: $(cat "$T/e"), leftovers: $(leftovers)"; fi
  rm -f "$f"
}

zcat "$S/corpus/kjv_verses.txt.gz" | head -n 60 | sed 's/^[^ ]* //' >"$T/text.txt"

# quantize: the issue's own command, then aliases of the input and the imatrix
cp "$K" "$T/x.gguf"
refused "quantize x.gguf x.gguf" "$T/x.gguf" "$B" quantize "$T/x.gguf" "$T/x.gguf" Q8_0
ln -s x.gguf "$T/sym.gguf"; ln "$T/x.gguf" "$T/hard.gguf"
refused "quantize onto a symlink to the input" "$T/x.gguf" "$B" quantize "$T/x.gguf" "$T/sym.gguf" Q8_0
refused "quantize onto a hard link of the input" "$T/x.gguf" "$B" quantize "$T/hard.gguf" "$T/x.gguf" Q8_0
echo "not an imatrix" >"$T/im.dat"
refused "quantize onto its imatrix" "$T/im.dat" "$B" quantize "$T/x.gguf" "$T/im.dat" Q4_K_M --imatrix "$T/im.dat"
rm -f "$T/sym.gguf" "$T/hard.gguf"
failwrite "quantize, failed write" "$T/q.gguf" "$B" quantize "$K" "$T/q.gguf" Q8_0 -t 2
echo old >"$T/q.gguf"
"$B" quantize "$K" "$T/q.gguf" Q7_K >/dev/null 2>&1
[ "$(cat "$T/q.gguf")" = old ] && ok "quantize, unknown type: the named output untouched" || no "quantize Q7_K touched its output"
"$B" quantize "$K" "$T/no/such/q.gguf" Q8_0 >/dev/null 2>"$T/e"
[ $? -eq 1 ] && [ "$(wc -l <"$T/e")" -eq 1 ] && [ -z "$(leftovers)" ] && ok "quantize into a missing directory: $(cat "$T/e")" ||
  no "quantize into a missing directory: $(cat "$T/e")"

# synth: --vocab is an input
cp "$M" "$T/v.gguf"
refused "synth onto its --vocab" "$T/v.gguf" "$B" synth --preset tiny-llama --vocab "$T/v.gguf" -o "$T/v.gguf"
failwrite "synth, failed write" "$T/s.gguf" "$B" synth --preset tiny-llama -t 2 -o "$T/s.gguf"
failwrite "synth, failed write of a mix's skeleton" "$T/s.gguf" "$B" synth --preset tiny-llama --type Q4_K_M -o "$T/s.gguf"

# convert: every file of the checkpoint is an input
python3 tests/convert_mkhf.py qwen3 "$T/hf" "$S/qwen3-tokenizer" || no "convert_mkhf.py"
refused "convert onto its safetensors" "$T/hf/model.safetensors" "$B" convert "$T/hf" -o "$T/hf/model.safetensors"
refused "convert onto its config.json" "$T/hf/config.json" "$B" convert "$T/hf" -o "$T/hf/config.json"
failwrite "convert, failed write" "$T/c.gguf" "$B" convert "$T/hf" -o "$T/c.gguf" --type q8_0 -t 2
failwrite "convert, failed write of a mix's skeleton" "$T/c.gguf" "$B" convert "$T/hf" -o "$T/c.gguf" --type Q4_K_M

# calibrate -o and perplexity --kl-divergence-base: the model and the text are inputs (copies: a
# broken refusal must not eat the repository's models)
cp "$MOE" "$T/moe.gguf"; MOE=$T/moe.gguf
refused "calibrate onto its model" "$MOE" "$B" calibrate -m "$MOE" -f "$T/text.txt" -o "$MOE" -c 64 -t 2
refused "calibrate onto its text" "$T/text.txt" "$B" calibrate -m "$MOE" -f "$T/text.txt" -o "$T/text.txt" -c 64 -t 2
failwrite "calibrate, failed write" "$T/stats.json" "$B" calibrate -m "$MOE" -f "$T/text.txt" -o "$T/stats.json" -c 64 -t 2
P="-m $T/x.gguf -c 128 --chunks 1 -t 2"
refused "perplexity onto its model" "$T/x.gguf" "$B" perplexity $P -f "$T/text.txt" --kl-divergence-base "$T/x.gguf"
refused "perplexity onto its text" "$T/text.txt" "$B" perplexity $P -f "$T/text.txt" --kl-divergence-base "$T/text.txt"
failwrite "perplexity, failed write" "$T/base.bin" "$B" perplexity $P -f "$T/text.txt" --kl-divergence-base "$T/base.bin"

# quantize another model onto the file a running server maps
cp "$K" "$T/served.gguf"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$B" serve -m "$T/served.gguf" --port "$PORT" -t 1 -c 256 >"$T/serve.log" 2>&1 & spid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
ask() { curl -sf "http://127.0.0.1:$PORT/v1/completions" -H "Content-Type: application/json" \
          -d '{"prompt":"In the beginning","max_tokens":12,"temperature":0}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])' 2>/dev/null; }
a=$(ask)
"$B" quantize "$M" "$T/served.gguf" Q8_0 -t 2 2>"$T/e" || no "quantize onto the served file: $(cat "$T/e")"
"$B" quantize "$M" "$T/q8.gguf" Q8_0 -t 2 2>/dev/null
b=$(ask)
if [ -n "$a" ] && [ "$a" = "$b" ] && kill -0 "$spid" 2>/dev/null; then ok "server alive after quantize onto its file, same answer: $b"
else no "server after quantize onto its file: before '$a', after '$b'; $(tail -n 3 "$T/serve.log")"; fi
cmp -s "$T/served.gguf" "$T/q8.gguf" && ok "the path now holds the new model" || no "the served path does not hold the new model"
kill -TERM "$spid" 2>/dev/null; wait "$spid"; rc=$?; spid=
[ $rc -eq 0 ] && ok "server exits 0 on SIGTERM" || no "server exited $rc: $(tail -n 3 "$T/serve.log")"
[ -z "$(leftovers)" ] || no "temporary files left: $(leftovers)"
exit $fail
