# kjv_eval.sh — what bench/kv_quality.sh, bench/quant_quality.sh and bench/attn_sparse.sh share:
# sourced, not run. Before sourcing: NAME (the script's name, for its messages) and CTX_DEFAULT;
# set -euo pipefail. Reads BUILD, SHARED, CTX, THREADS (2), CHUNKS (0: all); sets B, S, CTX, TH,
# CHUNKS, T (a temporary folder, removed at exit), die, num, final_ppl and the functions below.
B=${BUILD:-build}
S=${SHARED:-../shared}
CTX=${CTX:-$CTX_DEFAULT}
TH=${THREADS:-2}
CHUNKS=${CHUNKS:-0}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
die() { echo "$NAME: $*" >&2; exit 1; }
num() { sed -n "s/^$1 *: *\([-0-9.e]*\).*/\1/p" "$2"; } # a value of llama-perplexity's report
final_ppl() { sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p' "$1"; }

# kjv_texts: the verses as tools/train/corpus.sh writes them (reference stripped, a blank line
# before each chapter) into $T/all.txt; the held-out chapters (every 100th from the 51st:
# train.py's i % 100 == 50, 12 of 1,189) into $T/val.txt, checked to be 12; ch: --chunks CHUNKS
# (none for all)
kjv_texts() {
  zcat "$S/data/corpus/kjv_verses.txt.gz" |
    awk '{ ref = $1; sub(/^[^ ]+ /, ""); split(ref, cv, ":"); if (cv[2] == "1" && NR > 1) print ""; print }' >"$T/all.txt"
  chapters 50 >"$T/val.txt"
  local n_chap
  n_chap=$(awk 'BEGIN { RS = "" } END { print NR }' "$T/val.txt")
  [ "$n_chap" -eq 12 ] || die "expected 12 held-out chapters, got $n_chap"
  ch=(); [ "$CHUNKS" -gt 0 ] && ch=(--chunks "$CHUNKS")
  return 0
}
# chapters R: every 100th chapter of $T/all.txt from the (R + 1)th, separated by a blank line
chapters() { awk -v r="$1" 'BEGIN { RS = "" } (NR - 1) % 100 == r { printf "%s%s\n", n++ ? "\n" : "", $0 }' "$T/all.txt"; }

# brisk_base MODEL m: brisk's f16-cache run over the held-out text, llama-perplexity's logits file
# to $T/b.m; sets pb (its PPL) and info ("N tokens, K chunks of C")
brisk_base() {
  "$B/brisk" perplexity -m "$1" -f "$T/val.txt" -c "$CTX" -t "$TH" "${ch[@]}" --kv-type f16 \
    --kl-divergence-base "$T/b.$2" >"$T/o" 2>"$T/e" || die "brisk $2 f16: $(tail -n1 "$T/e")"
  pb=$(final_ppl "$T/o")
  info=$(sed -n 's/^perplexity: \(.*\)/\1/p' "$T/e" | head -n1)
}
# llama_base MODEL m: the same run by llama.cpp (flash attention auto, as llama-perplexity: its
# quantized V cache needs it), its file $T/l.m; sets pl
llama_base() {
  "$B/llamacpp-ref" perplexity -m "$1" -f "$T/val.txt" -c "$CTX" -t "$TH" "${ch[@]}" --kv f16 \
    --kl-divergence-base "$T/l.$2" >"$T/o" 2>"$T/e" || die "llama.cpp $2 f16: $(tail -n1 "$T/e")"
  pl=$(final_ppl "$T/o")
}
# same_tokens m: both engines' files hold the same tokens (header and token array), or the rows
# would score different text
same_tokens() {
  local hdr
  hdr=$(od -An -tu4 -j8 -N12 "$T/b.$1" | awk '{ print 20 + 4 * $1 * $3 }')
  cmp -s -n "$hdr" "$T/b.$1" "$T/l.$1" || die "$1: brisk and llama.cpp tokenized the text differently"
}
# cross_kld MODEL m: brisk's f16 run against llama.cpp's f16 file (how far apart the two baselines
# are), a line to $T/cross; then both files removed
cross_kld() {
  "$B/brisk" perplexity -m "$1" -t "$TH" --kv-type f16 --kl-divergence --kl-divergence-base "$T/l.$2" \
    >"$T/k" 2>"$T/e" || die "brisk $2 against llama.cpp: $(tail -n1 "$T/e")"
  echo "$2 KLD $(num "Mean    KLD" "$T/k" | sed 's/^-0\.0*$/0.000000/'), same top $(num "Same top p" "$T/k")%" >>"$T/cross"
  rm -f "$T/b.$2" "$T/l.$2"
}
# ref_cpu: the CPU llama.cpp names, on the first of MODELS
ref_cpu() { "$B/llamacpp-ref" info -m "models/${MODELS%% *}.gguf" 2>/dev/null | sed -n 's/^cpu //p'; }
# cross_line: the cross-engine sentence under the table
cross_line() { printf 'brisk f16 against llama.cpp f16 (same tokens): %s\n' "$(paste -sd';' "$T/cross" | sed 's/;/; /g')"; }
