#!/usr/bin/env bash
# `brisk quantize` against llama.cpp's llama_model_quantize (--pure) on stories260K:
# llama.cpp loads brisk's files, and its greedy tokens on them equal those on its own
# quantization of the same model (brisk's reference quantizers are byte-exact with
# ggml's; only the odd-width ffn_down differs: brisk keeps f32, llama.cpp falls back to f16).
set -u
B=${BUILD:-build}
M=${SHARED:-../shared}/data/stories260K/stories260K.gguf
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
for ty in q8_0 q4_0 q5_1; do  # (iq4_nl: llama.cpp searches scales, brisk uses the reference quantizer)
  "$B/brisk" quantize "$M" "$T/b.gguf" $ty -t 2 2>"$T/e" || { echo "FAIL brisk quantize $ty: $(cat "$T/e")"; fail=1; continue; }
  "$B/llamacpp-ref" quantize "$M" "$T/l.gguf" $(echo $ty | tr a-z A-Z) --pure -t 2 >/dev/null 2>&1 || { echo "FAIL llama.cpp quantize $ty"; fail=1; continue; }
  a=$("$B/llamacpp-ref" eval -m "$T/b.gguf" -p 1 -n 64 -t 1 2>/dev/null)
  b=$("$B/llamacpp-ref" eval -m "$T/l.gguf" -p 1 -n 64 -t 1 2>/dev/null)
  c=$("$B/brisk" run -m "$T/b.gguf" -p "Once upon a time" -n 16 --temp 0 2>/dev/null)
  if [ -n "$a" ] && [ "$a" = "$b" ] && [ -n "$c" ]; then echo "ok   $ty"; else echo "FAIL $ty: llama.cpp on brisk's file: $a / on its own: $b"; fail=1; fi
done
"$B/brisk" quantize "$M" "$T/x.gguf" q4_K >/dev/null 2>"$T/e"; rc=$?
if [ $rc -eq 1 ] && grep -q "cannot write type q4_K" "$T/e"; then echo "ok   unsupported type is a clear error"; else echo "FAIL unsupported type"; fail=1; fi
exit $fail
