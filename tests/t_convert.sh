#!/usr/bin/env bash
# `brisk convert` on tiny Hugging Face checkpoints written by tests/convert_mkhf.py
# (random weights, the real Qwen3 tokenizer from $SHARED/data/qwen3-tokenizer):
#  - the same weights stored as bf16 in one file and as f32 in three shards (with
#    the index), converted with 2 threads and with 1 thread and tiny slabs, give
#    byte-identical GGUFs;
#  - llama.cpp loads brisk's files and its greedy tokens equal brisk's (qwen3 f32,
#    Q4_K_M; llama): compared as text, llama.cpp's ids decoded here; q8_0 files
#    decode in llama.cpp as llama-quantize's Q8_0 of the f32 conversion does;
#  - llama's q/k permutation: a llama checkpoint and a qwen2 checkpoint of the same
#    weights (zero biases; NeoX RoPE on unpermuted rows is HF's rotate-half)
#    generate the same text in brisk;
#  - qwen3_moe, qwen3_5, qwen3_5_moe and qwen3_next: llama.cpp loads the
#    conversion and decodes;
#  - qwen3_next's fused in_proj_qkvz / in_proj_ba, split as llama.cpp's converter
#    does: the same weights as a qwen3_5_moe checkpoint decode alike in llama.cpp,
#    and brisk's greedy tokens on the conversion equal llama.cpp's;
#  - FP8: a qwen3 checkpoint of F8_E4M3 weights with block scales and the same
#    numbers dequantized to bf16 (exact: see convert_mkhf.py --fp8) convert to
#    byte-identical GGUFs (f32 and q8_0), so brisk's greedy tokens are the same;
#  - errors: one line on stderr, status 2 for usage, 1 for bad input.
# Under SAN=1 (everything ~10x slower) only the first, fourth (qwen3_5_moe) and
# last parts run; the pre-tokenizer is detected once, then given with --pre.
set -u
SAN=${SAN:-0}
B=${BUILD:-build}
TOK=${SHARED:-../shared}/data/qwen3-tokenizer
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
no() { echo "FAIL $*"; fail=1; }
mk() { python3 tests/convert_mkhf.py "$@" || no "convert_mkhf.py $*"; }
cv() { # dir out args...
  local d=$1 o=$2; shift 2
  "$B/brisk" convert "$d" -o "$o" "$@" 2>"$T/e" || { no "convert $d $*: $(tail -n 1 "$T/e")"; return 1; }
}
# llama.cpp's greedy ids after PROMPT decoded to text (control tokens dropped, runs of U+FFFD as one '?')
ref_text() { # model n
  local ids
  ids=$("$B/llamacpp-ref" eval -m "$1" --prompt-text "Hello world" -n "$2" -t 2 2>"$T/le") || { echo "ERR $(tail -n1 "$T/le")"; return; }
  python3 tests/bytelevel_decode.py "$TOK/tokenizer.json" "$ids" --replace
}
fffd() { sed 's/\xef\xbf\xbd\(\xef\xbf\xbd\)*/?/g'; }
brisk_text() { "$B/brisk" run -m "$1" -p "Hello world" -n "$2" --temp 0 --ignore-eos -t 2 2>/dev/null | fffd; }
same_as_llamacpp() { # model n what
  local a b
  a=$(ref_text "$1" "$2" | fffd); b=$(brisk_text "$1" "$2")
  if [ -n "$b" ] && [ "$a" = "$b" ]; then ok "$3: brisk = llama.cpp: $b"; else no "$3: llama.cpp '$a' / brisk '$b'"; fi
}

# 1. storage and threading do not change a byte
mk qwen3 "$T/a/m" "$TOK"
mk qwen3 "$T/b/m" "$TOK" --dtype f32 --shards 3
cv "$T/a/m" "$T/a.gguf" --type f32 -t 2 && cv "$T/b/m" "$T/b.gguf" --type f32 -t 1 --slab-kb 64 &&
  if cmp -s "$T/a.gguf" "$T/b.gguf"; then ok "bf16 file = f32 shards, -t 2 = -t 1 with small slabs"
  else no "bf16 single file and f32 shards convert differently"; fi
grep -q "pre-tokenizer qwen2" "$T/e" && ok "pre-tokenizer detected: qwen2" || no "pre-tokenizer: $(cat "$T/e")"
[ -z "$(ls "$T"/a.gguf.tmp.* "$T"/a.gguf.scratch.* 2>/dev/null)" ] || no "OUT.tmp.XXXXXX left behind"

PRE="--pre qwen2"
if [ "$SAN" != 1 ]; then
# 2. llama.cpp agrees with brisk on the converted files
same_as_llamacpp "$T/a.gguf" 12 "qwen3 f32"
# q8_0: llama.cpp on our file = llama.cpp on its own quantization of the f32 file
if cv "$T/a/m" "$T/q8.gguf" --type q8_0 $PRE &&
   "$B/llamacpp-ref" quantize "$T/a.gguf" "$T/lq8.gguf" Q8_0 --pure -t 2 >/dev/null 2>&1; then
  x=$("$B/llamacpp-ref" eval -m "$T/q8.gguf" -p "9707 1879" -n 8 -t 2 2>/dev/null)
  y=$("$B/llamacpp-ref" eval -m "$T/lq8.gguf" -p "9707 1879" -n 8 -t 2 2>/dev/null)
  [ -n "$x" ] && [ "$x" = "$y" ] && ok "qwen3 q8_0 = llama-quantize Q8_0 in llama.cpp: $x" || no "q8_0: '$x' / '$y'"
fi
cv "$T/a/m" "$T/q4km.gguf" --type Q4_K_M $PRE && same_as_llamacpp "$T/q4km.gguf" 6 "qwen3 Q4_K_M"

# 3. llama (permuted q/k, NORM RoPE) = qwen2 (NeoX RoPE) on the same weights
mk llama "$T/l/m" "$TOK" --tied
mk qwen2 "$T/q2/m" "$TOK" --tied --zero-bias
if cv "$T/l/m" "$T/llama.gguf" --type f16 $PRE && cv "$T/q2/m" "$T/qwen2.gguf" --type f16 $PRE; then
  same_as_llamacpp "$T/llama.gguf" 12 "llama f16"
  a=$(brisk_text "$T/llama.gguf" 12); b=$(brisk_text "$T/qwen2.gguf" 12)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "llama = qwen2 on the same weights: $a" || no "llama '$a' / qwen2 '$b'"
fi

# 4. architectures brisk does not run yet: llama.cpp loads and decodes them
fi
archs="qwen3_moe qwen3_5 qwen3_5_moe qwen3_next"; [ "$SAN" = 1 ] && archs=qwen3_5_moe
for a in $archs; do
  mk $a "$T/$a/m" "$TOK" --tied
  cv "$T/$a/m" "$T/$a.gguf" --type bf16 $PRE || continue
  out=$("$B/llamacpp-ref" eval -m "$T/$a.gguf" -p "1 2 3" -n 4 -t 2 2>&1)
  n=$(printf '%s\n' "$out" | tail -n 1 | wc -w)
  [ "$n" = 4 ] && ok "$a: llama.cpp decodes: $(printf '%s\n' "$out" | tail -n 1)" || no "$a: $(printf '%s\n' "$out" | tail -n 2)"
done

# 4b. qwen3_next = qwen3_5_moe on the same weights (MRoPE sections that cover every
# rotary pair turn Qwen3.5's RoPE into Qwen3-Next's for text)
if [ "$SAN" != 1 ]; then
mk qwen3_5_moe "$T/s35/m" "$TOK" --mrope 3,3,2
mk qwen3_next "$T/s3n/m" "$TOK"
if cv "$T/s35/m" "$T/s35.gguf" --type f32 $PRE && cv "$T/s3n/m" "$T/s3n.gguf" --type f32 $PRE; then
  x=$("$B/llamacpp-ref" eval -m "$T/s35.gguf" -p "1 2 3" -n 12 -t 2 2>/dev/null | tail -n 1)
  y=$("$B/llamacpp-ref" eval -m "$T/s3n.gguf" -p "1 2 3" -n 12 -t 2 2>/dev/null | tail -n 1)
  [ -n "$x" ] && [ "$x" = "$y" ] && ok "qwen3_next = qwen3_5_moe on the same weights in llama.cpp: $x" ||
    no "qwen3_5_moe '$x' / qwen3_next '$y'"
  same_as_llamacpp "$T/s3n.gguf" 12 "qwen3_next f32"
fi
fi

# 5. FP8 (block-scaled E4M3) = its bf16 dequantization
mk qwen3 "$T/f8/m" "$TOK" --fp8 e4m3
mk qwen3 "$T/f8d/m" "$TOK" --fp8 dequant
for ty in f32 q8_0; do
  cv "$T/f8/m" "$T/f8.gguf" --type $ty $PRE && cv "$T/f8d/m" "$T/f8d.gguf" --type $ty $PRE &&
    if cmp -s "$T/f8.gguf" "$T/f8d.gguf"; then ok "fp8 = its bf16 dequantization, $ty: byte-identical"
    else no "fp8 and its dequantization convert differently ($ty)"; fi
done
a=$(brisk_text "$T/f8.gguf" 8); b=$(brisk_text "$T/f8d.gguf" 8)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "fp8 q8_0 runs, greedy text as bf16's: $a" || no "fp8 '$a' / bf16 '$b'"

# 6. errors
bad() { # expected-rc description args...
  local want=$1 what=$2; shift 2
  "$B/brisk" convert "$@" >/dev/null 2>"$T/e"; local rc=$?
  if [ $rc -eq "$want" ] && [ "$(wc -l <"$T/e")" -eq 1 ]; then ok "$what: $(cat "$T/e")"
  else no "$what: rc $rc, stderr: $(cat "$T/e")"; fi
}
bad 2 "no output" "$T/a/m"
bad 2 "unknown type" "$T/a/m" -o "$T/x.gguf" --type q7_k
bad 2 "unknown option" "$T/a/m" -o "$T/x.gguf" --bogus 1
bad 1 "missing directory" "$T/none" -o "$T/x.gguf"
mkdir -p "$T/c" && cp "$T/a/m/"*.json "$T/c/" && head -c 100000 "$T/a/m/model.safetensors" >"$T/c/model.safetensors"
bad 1 "truncated safetensors" "$T/c" -o "$T/x.gguf"
sed 's/Qwen3ForCausalLM/GPT2LMHeadModel/' "$T/a/m/config.json" >"$T/c/config.json"
bad 1 "unsupported architecture" "$T/c" -o "$T/x.gguf"
mkdir -p "$T/f8x" && cp "$T/f8/m/"* "$T/f8x/"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); del c["quantization_config"]; json.dump(c, open(sys.argv[1], "w"))' "$T/f8x/config.json"
bad 1 "fp8 weights without quantization_config" "$T/f8x" -o "$T/x.gguf"
[ ! -e "$T/x.gguf" ] && [ -z "$(ls "$T"/x.gguf.* 2>/dev/null)" ] || no "a failed convert left a file"
exit $fail
