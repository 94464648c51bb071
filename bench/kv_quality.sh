#!/usr/bin/env bash
# KV cache quality beside speed (issue 28, item 3): perplexity and KL divergence against the
# f16 cache, for brisk and for llama.cpp (npm v0.4.0, through build/llamacpp-ref), on brisk's
# four trained models (models/README.md) over their held-out KJV chapters.
#
#   make NVCC= -j2 && make build/llamacpp-ref && bench/kv_quality.sh > table.md
#
# Each engine runs llama-perplexity's method: chunks of CTX tokens (default 256, the models'
# training window), each decoded from a cleared cache, the second half of each chunk scored.
# Per model and engine: one f16 run writes llama-perplexity's logits file (its PPL is the base),
# then each other KV type runs the file's tokens in KL-divergence mode against it. Both engines
# tokenize as llama-perplexity does and the script checks that their files hold the same tokens,
# so every row scores the same positions. Last, brisk's f16 run is compared with llama.cpp's f16
# file (the cross-engine KLD: how far apart the two f16 baselines are).
# The markdown table goes to stdout, progress to stderr. Environment: BUILD, SHARED, CTX,
# THREADS (2), CHUNKS (0: all), MODELS.
set -euo pipefail
NAME=kv_quality CTX_DEFAULT=256
MODELS=${MODELS:-"brisk-kjv-6m brisk-kjv-draft brisk-kjv-moe brisk-kjv-hybrid"}
. "$(dirname "$0")/kjv_eval.sh"
for f in "$B/brisk" "$B/llamacpp-ref" "$S/data/corpus/kjv_verses.txt.gz"; do [ -e "$f" ] || die "$f missing"; done
kjv_texts # $T/val.txt: the 12 held-out chapters

row() { # engine model type ppl ppl_f16 report|-
  local d kl top
  if [ "$6" = - ]; then d="base"; kl="base"; top="base"
  else
    d=$(awk -v a="$4" -v b="$5" 'BEGIN { printf "%+.3f%%", 100 * (a / b - 1) }')
    kl=$(num "Mean    KLD" "$6"); top="$(num "Same top p" "$6")%"
  fi
  printf '| %s | %s | %s | %.4f | %s | %s | %s |\n' "$2" "$1" "$3" "$4" "$d" "$kl" "$top" >>"$T/table"
}

t0=$(date +%s)
: >"$T/table"; : >"$T/cross"
for m in $MODELS; do
  M=models/$m.gguf
  [ -f "$M" ] || die "$M missing"
  echo "kv_quality: $m" >&2
  # brisk: the f16 base, then f16 -> q8_0, q4_0, q4_0h (rotated), f32 (f32 for scale: what f16 itself costs)
  brisk_base "$M" "$m"
  row brisk "$m" f16 "$pb" "$pb" -
  for t in q8_0 q4_0 q4_0h f32; do
    "$B/brisk" perplexity -m "$M" -t "$TH" --kv-type $t --kl-divergence --kl-divergence-base "$T/b.$m" \
      >"$T/k" 2>"$T/e" || die "brisk $m $t: $(tail -n1 "$T/e")"
    row brisk "$m" $t "$(num "Mean PPL(Q)" "$T/k")" "$pb" "$T/k"
  done
  # llama.cpp: the same, with its own f16 base
  llama_base "$M" "$m"
  row llama.cpp "$m" f16 "$pl" "$pl" -
  for t in q8_0 q4_0; do
    "$B/llamacpp-ref" perplexity -m "$M" -t "$TH" --kv $t --kl-divergence --kl-divergence-base "$T/l.$m" \
      >"$T/k" 2>"$T/e" || die "llama.cpp $m $t: $(tail -n1 "$T/e")"
    row llama.cpp "$m" $t "$(num "Mean PPL(Q)" "$T/k")" "$pl" "$T/k"
  done
  same_tokens "$m"
  cross_kld "$M" "$m"
done

cpu=$(ref_cpu)
echo "Text: the 12 held-out KJV chapters ($(wc -c <"$T/val.txt") bytes, $info, $(( ($CTX - 1 - $CTX / 2) ))" \
     "scored positions each). $TH threads; llama.cpp v0.4.0 CPU ($cpu), flash attention auto. $(( $(date +%s) - t0 )) s."
echo
echo "| model | engine | KV | PPL | ΔPPL vs f16 | mean KLD vs f16 | same top token |"
echo "|---|---|---|---|---|---|---|"
cat "$T/table"
echo
cross_line
