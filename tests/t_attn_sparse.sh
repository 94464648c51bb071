#!/usr/bin/env bash
# Block-sparse attention (--attn-sparse K, CPU) end to end on brisk's trained models (models/README.md):
#  1. with K above the pages of the longest span, greedy tokens equal dense attention's (the same
#     kernels over the sequence's own page table), prompt (query blocks) and decode, f16 and q8_0
#     caches, the dense model and the hybrid (one attention layer among Gated DeltaNet ones);
#  2. with few pages the run completes, and perplexity's --attn-sparse-measure reports a recall;
#  3. bad values are refused with a message.
set -u
B=${BUILD:-build}/brisk
S=${SHARED:-../shared}/data
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
[ -f "$S/corpus/kjv_verses.txt.gz" ] || { echo "skip t_attn_sparse: $S/corpus/kjv_verses.txt.gz not found [required]"; exit 77; }
# the first 24 verses of Genesis: 672 tokens, 42 pages of 16 (45 with the output)
zcat "$S/corpus/kjv_verses.txt.gz" | head -n 24 | sed 's/^[^ ]* //' >"$T/prompt.txt"
N=48
[ "${SAN:-0}" = 1 ] && N=16
for m in brisk-kjv-6m brisk-kjv-hybrid; do
  for kv in f16 q8_0; do
    R="-m models/$m.gguf -f $T/prompt.txt -n $N --temp 0 --ignore-eos -t 2 -c 1024 --kv-type $kv"
    $B run $R >"$T/dense" 2>"$T/e"; rc1=$?
    $B run $R --attn-sparse 100000 >"$T/sparse" 2>"$T/e2"; rc2=$?
    check "$m, $kv cache: --attn-sparse 100000 = dense, $N greedy tokens after a $(wc -w <"$T/prompt.txt")-word prompt" \
      '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ -s "$T/dense" ] && cmp -s "$T/dense" "$T/sparse"'
  done
done
$B run -m models/brisk-kjv-6m.gguf -f "$T/prompt.txt" -n 16 --temp 0 -t 2 -c 1024 --attn-sparse 4 >"$T/o" 2>"$T/e"; rc=$?
check "--attn-sparse 4 runs" '[ $rc -eq 0 ] && [ -s "$T/o" ]'
zcat "$S/corpus/kjv_verses.txt.gz" | head -n 120 | sed 's/^[^ ]* //' >"$T/text.txt"
$B perplexity -m models/brisk-kjv-6m.gguf -f "$T/text.txt" -c 512 --chunks 1 -t 2 --attn-sparse 8 --attn-sparse-measure \
  >"$T/p" 2>"$T/e"; rc=$?
r=$(sed -n 's/.*recall of the true top-K pages \([0-9.]*\),.*/\1/p' "$T/p")
check "perplexity --attn-sparse 8 --attn-sparse-measure: recall reported ($r)" \
  '[ $rc -eq 0 ] && [ -n "$r" ] && awk -v r="$r" "BEGIN{exit !(r > 0 && r <= 1)}"'
$B run -m models/brisk-kjv-6m.gguf -p hi -n 1 --attn-sparse 0 >/dev/null 2>"$T/e"; rc=$?
check "--attn-sparse 0 refused" '[ $rc -eq 2 ] && grep -q "attn-sparse" "$T/e"'
$B run -m models/brisk-kjv-6m.gguf -p hi -n 1 --attn-sparse x >/dev/null 2>"$T/e"; rc=$?
check "--attn-sparse x refused" '[ $rc -eq 2 ] && grep -q "attn-sparse" "$T/e"'
$B perplexity -m models/brisk-kjv-6m.gguf -f "$T/text.txt" --attn-sparse-measure >/dev/null 2>"$T/e"; rc=$?
check "--attn-sparse-measure alone refused" '[ $rc -eq 2 ] && grep -q "needs --attn-sparse" "$T/e"'
exit $fail
