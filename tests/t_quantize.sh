#!/usr/bin/env bash
# `brisk quantize` (the CLI) against llama.cpp's llama_model_quantize on stories260K:
# llama.cpp loads brisk's files and its greedy tokens on them equal those on its own
# quantization of the same model (the tensor data is byte-identical: the K types fall
# back to Q5_0/Q8_0/F16 here, dim 64 being no multiple of 256). The per-tensor types,
# bytes and RMSE of every mix, the imatrix and the round trip through brisk are
# checked on bigger synthetic models by tests/test_quant_model.c. Then bad arguments:
# one line on stderr, exit status 2 (usage) or 1 (the run failed).
set -u
B=${BUILD:-build}
M=${SHARED:-../shared}/data/stories260K/stories260K.gguf
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
for c in "q8_0 --pure" "q4_0 --pure" "Q5_1 --pure" "Q4_K_M" "IQ4_XS"; do
  set -- $c
  "$B/brisk" quantize "$M" "$T/b.gguf" $c -t 2 2>"$T/e" || { echo "FAIL brisk quantize $c: $(cat "$T/e")"; fail=1; continue; }
  "$B/llamacpp-ref" quantize "$M" "$T/l.gguf" $(echo $1 | tr a-z A-Z) ${2:-} -t 2 >/dev/null 2>&1 || { echo "FAIL llama.cpp quantize $c"; fail=1; continue; }
  a=$("$B/llamacpp-ref" eval -m "$T/b.gguf" -p 1 -n 64 -t 1 2>/dev/null)
  b=$("$B/llamacpp-ref" eval -m "$T/l.gguf" -p 1 -n 64 -t 1 2>/dev/null)
  r=$("$B/brisk" run -m "$T/b.gguf" -p "Once upon a time" -n 16 --temp 0 2>/dev/null)
  if [ -n "$a" ] && [ "$a" = "$b" ] && [ -n "$r" ]; then echo "ok   $c"; else echo "FAIL $c: llama.cpp on brisk's file: $a / on its own: $b"; fail=1; fi
done
# bad arguments: exactly one line on stderr
bad() { # expected-rc description args...
  local want=$1 what=$2; shift 2
  "$B/brisk" quantize "$@" >/dev/null 2>"$T/e"; local rc=$?
  if [ $rc -eq $want ] && [ "$(wc -l <"$T/e")" -eq 1 ]; then echo "ok   $what: $(cat "$T/e")"
  else echo "FAIL $what: rc $rc, stderr: $(cat "$T/e")"; fail=1; fi
}
bad 2 "unknown type" "$M" "$T/x.gguf" Q7_K
bad 2 "missing type" "$M" "$T/x.gguf"
bad 2 "unknown option" "$M" "$T/x.gguf" Q4_0 --bogus
bad 2 "bad thread count" "$M" "$T/x.gguf" Q4_0 -t 0
bad 1 "missing input" "$T/none.gguf" "$T/x.gguf" Q4_0
bad 1 "missing imatrix" "$M" "$T/x.gguf" Q4_K_M --imatrix "$T/none.dat"
# a quantized file quantized again: refused unless --allow-requantize, as llama-quantize
"$B/brisk" quantize "$M" "$T/q8.gguf" Q8_0 -t 2 2>/dev/null
bad 1 "requantize without --allow-requantize" "$T/q8.gguf" "$T/x.gguf" Q4_0
if grep -q "allow-requantize" "$T/e" && [ ! -e "$T/x.gguf" ] &&
   "$B/brisk" quantize "$T/q8.gguf" "$T/x.gguf" Q4_0 --allow-requantize -t 2 2>/dev/null && [ -s "$T/x.gguf" ]
then echo "ok   --allow-requantize quantizes a Q8_0 file to Q4_0"; else echo "FAIL --allow-requantize"; fail=1; fi
exit $fail
