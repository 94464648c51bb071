#!/usr/bin/env bash
# brisk synth: the same bytes for any thread count and slab size; every tensor of a
# mix gets the type llama.cpp's llama_model_quantize gives it on the f32 version of
# the same model; the tiny MoE and hybrid presets (qwen3moe, qwen35, qwen35moe) load
# in llama.cpp and give finite logits and greedy tokens; `brisk info` reads them; an
# interrupted write leaves no file (and keeps an old one); bad arguments are one
# line on stderr. The built-in vocabulary keeps the files small (a few MB).
set -u
B=${BUILD:-build}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
no() { echo "FAIL $*"; fail=1; }
syn() { "$B/brisk" synth "$@" 2>"$T/err" || { no "synth $*: $(tail -n1 "$T/err")"; return 1; }; }
types() { "$B/brisk" info "$1" | awk '/^ +[0-9]+  [a-z]/{print $2, $3}' | sort; }

# determinism: -t 1 vs -t 2, different slab sizes (tensors split over many slabs)
for p in "tiny-qwen35moe --type Q4_K_M --expert-skew 1.5" "tiny-llama --type q8_0 --seed 5" "tiny-qwen3moe --type bf16"; do
  syn --preset $p --layers 2 -t 1 --slab-kb 40 -o "$T/a.gguf" && syn --preset $p --layers 2 -t 2 --slab-kb 24 -o "$T/b.gguf" &&
    syn --preset $p --layers 2 -t 2 -o "$T/c.gguf" || continue
  if cmp -s "$T/a.gguf" "$T/b.gguf" && cmp -s "$T/a.gguf" "$T/c.gguf"; then ok "same bytes for -t 1/2: $p"
  else no "bytes differ between thread counts: $p"; fi
done
syn --preset tiny-llama --type q8_0 --seed 6 -o "$T/d.gguf" && syn --preset tiny-llama --type q8_0 --seed 5 -o "$T/a.gguf" &&
  { cmp -s "$T/a.gguf" "$T/d.gguf" && no "--seed changes nothing" || ok "--seed changes the weights"; }

# mix tables against llama.cpp (the f32 model quantized by llama_model_quantize)
# (a few pairs: each costs about a second on 2 cores)
for pm in "tiny-qwen3moe Q4_K_M" "tiny-qwen35 Q3_K_M" "tiny-qwen35moe Q4_K_M" "tiny-llama Q5_K_S"; do
  set -- $pm; p=$1; m=$2
  [ -f "$T/$p-f32.gguf" ] || syn --preset $p --type f32 -o "$T/$p-f32.gguf" || continue
  syn --preset $p --type $m -o "$T/ours.gguf" || continue
  "$B/llamacpp-ref" quantize "$T/$p-f32.gguf" "$T/theirs.gguf" $m -t 2 >/dev/null 2>&1 || { no "llama.cpp quantize $p $m"; continue; }
  if [ "$(types "$T/ours.gguf")" = "$(types "$T/theirs.gguf")" ]; then ok "$p $m: per-tensor types equal llama.cpp's"
  else no "$p $m: types differ"; diff <(types "$T/ours.gguf") <(types "$T/theirs.gguf") | head -8; fi
done

# llama.cpp loads the MoE/hybrid presets (2 layers; qwen35*: one DeltaNet, one attention layer)
for p in tiny-qwen3moe tiny-qwen35 tiny-qwen35moe; do
  skew=; case $p in *moe) skew="--expert-skew 1";; esac
  syn --preset $p --layers 2 --type Q4_K_M $skew -o "$T/$p.gguf" || continue
  out=$("$B/llamacpp-ref" eval -m "$T/$p.gguf" -p 1 -n 4 -t 2 --top 1 2>&1)
  ids=$(printf '%s\n' "$out" | tail -n1)
  if printf "%s\n" "$out" | grep -q "^top row" && ! printf "%s\n" "$out" | grep "^top row" | grep -qiE "nan|inf" &&
     [ "$(echo $ids | wc -w)" = 4 ]; then ok "llama.cpp runs $p: $ids"
  else no "llama.cpp on $p: $(printf '%s\n' "$out" | tail -n3)"; fi
  arch=$("$B/brisk" info "$T/$p.gguf" | awk '$1=="general.architecture"{print $3}')
  case $p in tiny-qwen3moe) want='"qwen3moe"';; tiny-qwen35) want='"qwen35"';; *) want='"qwen35moe"';; esac
  [ "$arch" = "$want" ] && ok "brisk info reads $p ($arch)" || no "brisk info $p: arch '$arch'"
done

# interrupted writes: no OUT (SIGTERM: no OUT.tmp.XXXXXX either); an existing OUT survives
big="--preset qwen3-0.6b --type Q4_K_M -t 1"
tmps() { ls "$1".tmp.* "$1".scratch.* 2>/dev/null; }
started() { for _ in $(seq 100); do [ -n "$(ls "$1".tmp.* 2>/dev/null)" ] && return 0; sleep 0.05; done; return 1; }
"$B/brisk" synth $big -o "$T/x.gguf" 2>/dev/null & pid=$!
started "$T/x.gguf" || no "synth never started writing $T/x.gguf.tmp.XXXXXX"
sleep 0.3; kill -TERM $pid; wait $pid 2>/dev/null
[ ! -e "$T/x.gguf" ] && [ -z "$(tmps "$T/x.gguf")" ] && ok "SIGTERM leaves no file" || no "SIGTERM left $(ls "$T" | grep x.gguf)"
syn --preset tiny-llama -o "$T/y.gguf" && cp "$T/y.gguf" "$T/y0.gguf"
"$B/brisk" synth $big -o "$T/y.gguf" 2>/dev/null & pid=$!
started "$T/y.gguf" || no "synth never started writing $T/y.gguf.tmp.XXXXXX"
sleep 0.3; kill -KILL $pid; wait $pid 2>/dev/null
cmp -s "$T/y0.gguf" "$T/y.gguf" && ok "SIGKILL keeps the old OUT intact" || no "SIGKILL damaged the old OUT"

# --repeat-rows: same tensors and size, rows repeat with the period, the model runs
syn --preset tiny-qwen3moe --type q4_k_m --expert-skew 1 -o "$T/r0.gguf" &&
  syn --preset tiny-qwen3moe --type q4_k_m --expert-skew 1 --repeat-rows 8 -o "$T/r8.gguf"
if [ "$(stat -c %s "$T/r0.gguf")" = "$(stat -c %s "$T/r8.gguf")" ] &&
   ! cmp -s "$T/r0.gguf" "$T/r8.gguf" &&
   "$B/brisk" run -m "$T/r8.gguf" -p "hi" -n 4 --temp 0 -ngl 0 >/dev/null 2>&1; then
  ok "--repeat-rows: same size, other bytes, runs"
else no "--repeat-rows"; fi
python3 - "$T/r8.gguf" <<'PY' && ok "--repeat-rows 8: rows r and r + 8 of blk.0.ffn_up_exps are equal" || no "--repeat-rows: rows differ"
import struct, sys
# minimal GGUF v3 reader: find blk.0.ffn_up_exps.weight and compare row 0 with row 8
f = open(sys.argv[1], 'rb').read()
o = 8; nt, nkv = struct.unpack_from('<QQ', f, o); o += 16
def rstr(o):
    n, = struct.unpack_from('<Q', f, o); return f[o + 8:o + 8 + n].decode(), o + 8 + n
SZ = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def skip(t, o):
    if t == 8: return rstr(o)[1]
    if t == 9:
        et, n = struct.unpack_from('<IQ', f, o); o += 12
        for _ in range(n): o = skip(et, o)
        return o
    return o + SZ[t]
align = 32
for _ in range(nkv):
    k, o = rstr(o); t, = struct.unpack_from('<I', f, o); o += 4
    if k == 'general.alignment': align, = struct.unpack_from('<I', f, o)
    o = skip(t, o)
infos = []
for _ in range(nt):
    name, o = rstr(o); nd, = struct.unpack_from('<I', f, o); o += 4
    ne = struct.unpack_from('<%dQ' % nd, f, o); o += 8 * nd
    ty, off = struct.unpack_from('<IQ', f, o); o += 12
    infos.append((name, ne, ty, off))
base = (o + align - 1) // align * align
name, ne, ty, off = [i for i in infos if i[0] == 'blk.0.ffn_up_exps.weight'][0]
rb = {12: 144 * ne[0] // 256, 14: 210 * ne[0] // 256, 8: 34 * ne[0] // 32}[ty]
a = base + off
sys.exit(0 if f[a:a + rb] == f[a + 8 * rb:a + 9 * rb] and f[a:a + rb] != f[a + rb:a + 2 * rb] else 1)
PY

# --type with the ternary, FP4 and 1/2-bit formats: every matrix of that type, and the model runs
for t in tq1_0 tq2_0 nvfp4 q1_0 q2_0; do
  syn --preset tiny-llama --type $t -o "$T/l.gguf" || continue
  if [ "$(types "$T/l.gguf" | awk '$1 ~ /^blk/ && $1 !~ /norm/{print $2}' | sort -u)" = "$t" ] &&
     "$B/brisk" run -m "$T/l.gguf" -p "hi" -n 4 --temp 0 -ngl 0 >/dev/null 2>&1; then ok "--type $t: every matrix $t, runs"
  else no "--type $t: $(types "$T/l.gguf" | head -3)"; fi
done

# bad arguments: exactly one line on stderr
bad() { # expected-rc description args...
  local want=$1 what=$2; shift 2
  "$B/brisk" synth "$@" >/dev/null 2>"$T/e"; local rc=$?
  if [ $rc -eq $want ] && [ "$(wc -l <"$T/e")" -eq 1 ]; then ok "$what: $(cat "$T/e")"
  else no "$what: rc $rc, stderr: $(cat "$T/e")"; fi
}
bad 2 "unknown preset" --preset qwen9-1b -o "$T/z.gguf"
bad 2 "unknown type" --preset tiny-llama --type q7_k -o "$T/z.gguf"
bad 1 "a type llama.cpp writes only with an importance matrix, which synth has not" --preset tiny-llama --type iq2_xxs -o "$T/z.gguf"
bad 2 "bad thread count" --preset tiny-llama -t 0 -o "$T/z.gguf"
bad 2 "skew on a dense model" --preset tiny-llama --expert-skew 1 -o "$T/z.gguf"
bad 1 "unwritable path" --preset tiny-llama -o "$T/no/such/dir/z.gguf"
bad 1 "missing vocab" --preset tiny-llama --vocab "$T/none.gguf" -o "$T/z.gguf"
bad 1 "hybrid without an attention layer" --preset tiny-qwen35 --layers 1 -o "$T/z.gguf"
bad 1 "Q2_K_S without imatrix" --preset tiny-llama --type Q2_K_S -o "$T/z.gguf"
[ ! -e "$T/z.gguf" ] && [ -z "$(tmps "$T/z.gguf")" ] && ok "failed runs leave no file" || no "a failed run left a file"
exit $fail
