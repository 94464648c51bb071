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
B=${BUILD:-build}
S=${SHARED:-../shared}
CTX=${CTX:-256}
TH=${THREADS:-2}
CHUNKS=${CHUNKS:-0}
MODELS=${MODELS:-"brisk-kjv-6m brisk-kjv-draft brisk-kjv-moe brisk-kjv-hybrid"}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
die() { echo "kv_quality: $*" >&2; exit 1; }
for f in "$B/brisk" "$B/llamacpp-ref" "$S/data/corpus/kjv_verses.txt.gz"; do [ -e "$f" ] || die "$f missing"; done

# The held-out text: the verses as tools/train/corpus.sh writes them (reference stripped, a blank
# line before each chapter), then every 100th chapter from the 51st (train.py's i % 100 == 50:
# 12 of 1,189), chapters separated by a blank line.
zcat "$S/data/corpus/kjv_verses.txt.gz" |
  awk '{ ref = $1; sub(/^[^ ]+ /, ""); split(ref, cv, ":"); if (cv[2] == "1" && NR > 1) print ""; print }' |
  awk 'BEGIN { RS = "" } (NR - 1) % 100 == 50 { printf "%s%s\n", n++ ? "\n" : "", $0 }' >"$T/val.txt"
n_chap=$(awk 'BEGIN { RS = "" } END { print NR }' "$T/val.txt")
[ "$n_chap" -eq 12 ] || die "expected 12 held-out chapters, got $n_chap"
ch=(); [ "$CHUNKS" -gt 0 ] && ch=(--chunks "$CHUNKS")

num() { sed -n "s/^$1 *: *\([-0-9.e]*\).*/\1/p" "$2"; } # a value of llama-perplexity's report
row() { # engine model type ppl ppl_f16 report|-
  local d kl top
  if [ "$6" = - ]; then d="base"; kl="base"; top="base"
  else
    d=$(awk -v a="$4" -v b="$5" 'BEGIN { printf "%+.3f%%", 100 * (a / b - 1) }')
    kl=$(num "Mean    KLD" "$6"); top="$(num "Same top p" "$6")%"
  fi
  printf '| %s | %s | %s | %.4f | %s | %s | %s |\n' "$2" "$1" "$3" "$4" "$d" "$kl" "$top" >>"$T/table"
}
final_ppl() { sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p' "$1"; }

t0=$(date +%s)
: >"$T/table"; : >"$T/cross"
for m in $MODELS; do
  M=models/$m.gguf
  [ -f "$M" ] || die "$M missing"
  echo "kv_quality: $m" >&2
  # brisk: the f16 base, then f16 -> q8_0, q4_0, q4_0h (rotated), f32 (f32 for scale: what f16 itself costs)
  "$B/brisk" perplexity -m "$M" -f "$T/val.txt" -c "$CTX" -t "$TH" "${ch[@]}" --kv-type f16 \
    --kl-divergence-base "$T/b.$m" >"$T/o" 2>"$T/e" || die "brisk $m f16: $(tail -n1 "$T/e")"
  pb=$(final_ppl "$T/o")
  info=$(sed -n 's/^perplexity: \(.*\)/\1/p' "$T/e" | head -n1) # "N tokens, K chunks of C"
  row brisk "$m" f16 "$pb" "$pb" -
  for t in q8_0 q4_0 q4_0h f32; do
    "$B/brisk" perplexity -m "$M" -t "$TH" --kv-type $t --kl-divergence --kl-divergence-base "$T/b.$m" \
      >"$T/k" 2>"$T/e" || die "brisk $m $t: $(tail -n1 "$T/e")"
    row brisk "$m" $t "$(num "Mean PPL(Q)" "$T/k")" "$pb" "$T/k"
  done
  # llama.cpp: the same, with its own f16 base (flash attention auto, as llama-perplexity: its
  # quantized V cache needs it)
  "$B/llamacpp-ref" perplexity -m "$M" -f "$T/val.txt" -c "$CTX" -t "$TH" "${ch[@]}" --kv f16 \
    --kl-divergence-base "$T/l.$m" >"$T/o" 2>"$T/e" || die "llama.cpp $m f16: $(tail -n1 "$T/e")"
  pl=$(final_ppl "$T/o")
  row llama.cpp "$m" f16 "$pl" "$pl" -
  for t in q8_0 q4_0; do
    "$B/llamacpp-ref" perplexity -m "$M" -t "$TH" --kv $t --kl-divergence --kl-divergence-base "$T/l.$m" \
      >"$T/k" 2>"$T/e" || die "llama.cpp $m $t: $(tail -n1 "$T/e")"
    row llama.cpp "$m" $t "$(num "Mean PPL(Q)" "$T/k")" "$pl" "$T/k"
  done
  # both files must hold the same tokens (header and token array), or the rows score different text
  hdr=$(od -An -tu4 -j8 -N12 "$T/b.$m" | awk '{ print 20 + 4 * $1 * $3 }')
  cmp -s -n "$hdr" "$T/b.$m" "$T/l.$m" || die "$m: brisk and llama.cpp tokenized the text differently"
  # cross-engine: brisk's f16 run against llama.cpp's f16 file
  "$B/brisk" perplexity -m "$M" -t "$TH" --kv-type f16 --kl-divergence --kl-divergence-base "$T/l.$m" \
    >"$T/k" 2>"$T/e" || die "brisk $m against llama.cpp: $(tail -n1 "$T/e")"
  echo "$m KLD $(num "Mean    KLD" "$T/k" | sed 's/^-0\.0*$/0.000000/'), same top $(num "Same top p" "$T/k")%" >>"$T/cross"
  rm -f "$T/b.$m" "$T/l.$m"
done

cpu=$("$B/llamacpp-ref" info -m "models/${MODELS%% *}.gguf" 2>/dev/null | sed -n 's/^cpu //p')
echo "Text: the 12 held-out KJV chapters ($(wc -c <"$T/val.txt") bytes, $info, $(( ($CTX - 1 - $CTX / 2) ))" \
     "scored positions each). $TH threads; llama.cpp v0.4.0 CPU ($cpu), flash attention auto. $(( $(date +%s) - t0 )) s."
echo
echo "| model | engine | KV | PPL | ΔPPL vs f16 | mean KLD vs f16 | same top token |"
echo "|---|---|---|---|---|---|---|"
cat "$T/table"
echo
printf 'brisk f16 against llama.cpp f16 (same tokens): %s\n' "$(paste -sd';' "$T/cross" | sed 's/;/; /g')"
