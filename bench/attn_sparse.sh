#!/usr/bin/env bash
# Block-sparse attention's quality (--attn-sparse K, CPU; docs/long-context.md): on brisk's trained
# models at their longest context (2,048, the GGUFs' context_length; trained on 256-token windows),
# over the 12 held-out KJV chapters (as bench/kv_quality.sh extracts them), for a few K (pages of 16
# tokens read per query group, out of up to 128):
#   recall: the share of the true top-K pages by attention mass (dense softmax weights of the query
#           group's rows, added per page) that the key-bound choice read; mass: the share of the
#           attention mass the pages read hold (both over the query groups that dropped a page,
#           all layers: perplexity --attn-sparse-measure);
#   KLD:    mean KL divergence of the next-token distribution from dense attention's, and how often
#           the top token is the same (perplexity --kl-divergence against a dense base run).
# Perplexity runs each chunk as one prompt, so the choice is made per query block (16 lanes: 8
# tokens x 2 heads here), the second half of each chunk scored.
#
#   make NVCC= BUILD=build-cpu -j2 all && BUILD=build-cpu bench/attn_sparse.sh > table.md
#
# Environment: BUILD, SHARED, CTX (2048), THREADS (2), CHUNKS (0: all), MODELS, KS, KV (f16).
set -euo pipefail
NAME=attn_sparse CTX_DEFAULT=2048
MODELS=${MODELS:-"brisk-kjv-6m brisk-kjv-hybrid"}
KS=${KS:-"4 8 16 32 64"}
KV=${KV:-f16}
. "$(dirname "$0")/kjv_eval.sh"
for f in "$B/brisk" "$S/data/corpus/kjv_verses.txt.gz"; do [ -e "$f" ] || die "$f missing"; done
kjv_texts # $T/val.txt: the 12 held-out chapters
t0=$SECONDS
echo "| model | K (pages of 16) | tokens read (of $CTX) | recall of true top-K | attention mass read (true top-K's) | mean KLD vs dense | same top token | PPL (dense) |"
echo "|---|---|---|---|---|---|---|---|"
for m in $MODELS; do
  f=models/$m.gguf
  P=(-m "$f" -c "$CTX" -t "$TH" --kv-type "$KV" "${ch[@]}")
  "$B/brisk" perplexity "${P[@]}" -f "$T/val.txt" --kl-divergence-base "$T/$m.bin" >"$T/base" 2>"$T/e" || { cat "$T/e" >&2; die "$m: base run failed"; }
  ppl=$(sed -n 's/.*PPL = \([0-9.]*\).*/\1/p' "$T/base")
  for k in $KS; do
    echo "attn_sparse: $m K=$k ($((SECONDS - t0)) s)" >&2
    "$B/brisk" perplexity "${P[@]}" --kl-divergence --kl-divergence-base "$T/$m.bin" --attn-sparse "$k" \
      --attn-sparse-measure >"$T/o" 2>"$T/e" || { cat "$T/e" >&2; die "$m K=$k failed"; }
    rec=$(sed -n 's/.*recall of the true top-K pages \([0-9.]*\),.*/\1/p' "$T/o")
    mass=$(sed -n 's/.*attention mass read \([0-9.]*\) .*/\1/p' "$T/o")
    best=$(sed -n 's/.*(the true top-K pages: \([0-9.]*\)).*/\1/p' "$T/o")
    echo "| $m | $k | $((k * 16)) | $rec | $mass ($best) | $(num "Mean    KLD" "$T/o") | $(num "Same top p" "$T/o")% | $ppl |"
  done
done
echo "attn_sparse: $((SECONDS - t0)) s" >&2
