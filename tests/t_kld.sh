#!/usr/bin/env bash
# `brisk perplexity` in llama-perplexity's KL-divergence mode, on a trained model
# (brisk-kjv-6m, 64-wide heads) over KJV verses: a base run with the f16 KV cache,
# then the f16, q8_0 and q4_0 caches against it, the quantized caches beside llama.cpp's same
# types, and files it must refuse.
set -u
B=${BUILD:-build}/brisk
S=${SHARED:-../shared}/data
K=models/brisk-kjv-6m.gguf
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
kld() { sed -n 's/^Mean    KLD: *\([-0-9.e]*\) .*/\1/p' "$1"; }

zcat "$S/corpus/kjv_verses.txt.gz" | head -n 400 | sed 's/^[^ ]* //' >"$T/text.txt" # verses without "Ge1:1"
P="-m $K -c 128 --chunks 3 -t 2"
echo stale >"$T/base.bin" # the base file is replaced, as llama-perplexity does
$B perplexity $P -f "$T/text.txt" --kl-divergence-base "$T/base.bin" >"$T/o" 2>"$T/e"; rc=$?
ppl=$(sed -n 's/.*PPL = \([0-9.]*\).*/\1/p' "$T/o")
check "base run: PPL printed, file written whole" \
  '[ $rc -eq 0 ] && [ -n "$ppl" ] && [ "$(head -c 8 "$T/base.bin")" = "_logits_" ] && ! ls "$T"/base.bin.tmp.* >/dev/null 2>&1'
for t in f16 q8_0 q4_0; do
  $B perplexity $P --kv-type $t --kl-divergence --kl-divergence-base "$T/base.bin" >"$T/k$t" 2>"$T/e"; rc=$?
  check "--kl-divergence, $t cache: runs" '[ $rc -eq 0 ] && grep -q "^Same top p:" "$T/k$t"'
done
k16=$(kld "$T/kf16"); k8=$(kld "$T/kq8_0"); k4=$(kld "$T/kq4_0")
echo "     mean KLD from the f16 base: f16 $k16, q8_0 $k8, q4_0 $k4"
ppl16=$(awk '/^Mean PPL\(Q\) /{printf "%.4f", $4}' "$T/kf16") # (6 decimals there, 4 in the base run's line)
check "f16 against its own base: KLD exactly 0, PPL ratio 1, same top 100%" \
  'grep -q "^Every position.s KLD is exactly 0" "$T/kf16" && grep -q "^Mean PPL(Q)/PPL(base) *:  *1.000000 ± *0.000000" "$T/kf16" &&
   grep -q "^Same top p: 100.000" "$T/kf16" && [ -n "$ppl16" ] && [ "$ppl16" = "$(printf %.4f "$ppl")" ]'
check "KLD: 0 < q8_0 < q4_0, both small and finite" \
  'awk -v a="$k8" -v b="$k4" "BEGIN{exit !(a > 0 && a < b && a < 0.005 && b < 0.1)}"'

# against llama.cpp (build/llamacpp-ref perplexity: llama-perplexity's method and file), on a
# model whose vocab adds BOS: both tokenize the text alike (BOS first, then every chunk's first
# token replaced by BOS), and each reads the other's f16 file with a KLD near 0
R=${BUILD:-build}/llamacpp-ref
if [ -x "$R" ] && [ -f "$S/stories260K/stories260K.gguf" ]; then
  Q="-m $S/stories260K/stories260K.gguf -c 128 --chunks 2 -t 2"
  $B perplexity $Q -f "$T/text.txt" --kl-divergence-base "$T/sb.bin" >/dev/null 2>&1
  $R perplexity $Q -f "$T/text.txt" --kl-divergence-base "$T/sl.bin" >/dev/null 2>"$T/e"; rc=$?
  check "llama.cpp's base file: same header and tokens as brisk's, BOS first" \
    '[ $rc -eq 0 ] && cmp -s -n $((20 + 4 * 128 * 2)) "$T/sb.bin" "$T/sl.bin" && [ "$(od -An -tu4 -j20 -N4 "$T/sl.bin" | tr -d " ")" = 1 ]'
  $B perplexity $Q --kl-divergence --kl-divergence-base "$T/sl.bin" >"$T/x1" 2>/dev/null
  $R perplexity $Q --kl-divergence --kl-divergence-base "$T/sb.bin" >"$T/x2" 2>/dev/null
  x1=$(kld "$T/x1"); x2=$(kld "$T/x2")
  echo "     f16 KLD brisk vs llama.cpp's file $x1, llama.cpp vs brisk's file $x2"
  check "brisk f16 and llama.cpp f16 against each other's file: KLD < 1e-4, same top >= 99%" \
    'awk -v a="$x1" -v b="$x2" "BEGIN{exit !(a != \"\" && b != \"\" && a < 1e-4 && b < 1e-4)}" &&
     awk "/^Same top p:/ { exit !(\$4 >= 99) }" "$T/x1" && awk "/^Same top p:/ { exit !(\$4 >= 99) }" "$T/x2"'
  # the quantized caches beside llama.cpp's same types, on the trained model (issue 37): each engine's
  # q8_0 and q4_0 scored against llama.cpp's f16 file; brisk's cost must be within 3x of llama.cpp's
  # own either way (measured within 1.8x; a broken cache costs orders of magnitude more), and q4_0h
  # (brisk's rotated q4_0, no llama.cpp peer) no worse than 1.5x brisk's q4_0
  $R perplexity $P -f "$T/text.txt" --kl-divergence-base "$T/lb.bin" >/dev/null 2>"$T/e"; rc=$?
  cmp -s -n $((20 + 4 * 128 * 3)) "$T/base.bin" "$T/lb.bin" || rc=1 # the same tokens
  for t in q8_0 q4_0 q4_0h; do
    $B perplexity $P --kv-type $t --kl-divergence --kl-divergence-base "$T/lb.bin" >"$T/bl$t" 2>/dev/null
    [ $t = q4_0h ] || $R perplexity $P --kv $t --kl-divergence --kl-divergence-base "$T/lb.bin" >"$T/ll$t" 2>/dev/null
  done
  b8=$(kld "$T/blq8_0"); l8=$(kld "$T/llq8_0"); b4=$(kld "$T/blq4_0"); l4=$(kld "$T/llq4_0"); bh=$(kld "$T/blq4_0h")
  echo "     KLD from llama.cpp's f16 file: q8_0 brisk $b8 llama.cpp $l8; q4_0 brisk $b4 llama.cpp $l4; q4_0h brisk $bh"
  check "quantized caches against llama.cpp's same types (brisk-kjv-6m): within 3x of its cost, q4_0h <= 1.5x q4_0" \
    '[ $rc -eq 0 ] && awk -v b8="$b8" -v l8="$l8" -v b4="$b4" -v l4="$l4" -v bh="$bh" "BEGIN{exit !(b8 != \"\" && l8 > 0 &&
       b4 > 0 && l4 > 0 && bh > 0 && b8 <= 3 * l8 + 1e-6 && l8 <= 3 * b8 + 1e-6 && b4 <= 3 * l4 && l4 <= 3 * b4 &&
       bh <= 1.5 * b4)}"'
fi

# files it must refuse, each with a one-line error
$B synth --preset tiny-qwen3 -o "$T/tq.gguf" >/dev/null 2>&1
$B perplexity -m "$T/tq.gguf" -t 2 --kl-divergence --kl-divergence-base "$T/base.bin" >/dev/null 2>"$T/e"; rc=$?
check "another model's vocabulary: exit 1, says so" \
  '[ $rc -eq 1 ] && [ $(wc -l <"$T/e") -eq 1 ] && grep -q "holds logits over 4096 tokens" "$T/e"'
head -c 1500000 "$T/base.bin" >"$T/trunc.bin"
$B perplexity $P --kl-divergence --kl-divergence-base "$T/trunc.bin" >/dev/null 2>"$T/e"; rc=$?
check "truncated file: exit 1, what it holds" \
  '[ $rc -eq 1 ] && [ $(wc -l <"$T/e") -eq 1 ] && grep -q "is truncated: .* holds 2 of its 3 chunks" "$T/e"'
$B perplexity -m $K -c 128 --chunks 2 -t 2 --kl-divergence --kl-divergence-base "$T/trunc.bin" >/dev/null 2>&1; rc=$?
check "truncated file: --chunks 2 compares the chunks it holds" '[ $rc -eq 0 ]'
$B perplexity $P --kl-divergence --kl-divergence-base "$T/text.txt" >/dev/null 2>"$T/e"; rc=$?
check "not a logits file: exit 1" '[ $rc -eq 1 ] && grep -q "is not a logits file" "$T/e"'
$B perplexity $P --kl-divergence >/dev/null 2>"$T/e"; rc=$?
check "--kl-divergence without a base: exit 2" '[ $rc -eq 2 ] && grep -q "needs --kl-divergence-base" "$T/e"'
$B perplexity $P -f "$T/text.txt" --kl-divergence-base "$T/nodir/base.bin" >/dev/null 2>"$T/e"; rc=$?
check "base in a missing folder: exit 1, nothing left" '[ $rc -eq 1 ] && grep -q "cannot create" "$T/e" && [ ! -e "$T/nodir" ]'
exit $fail
