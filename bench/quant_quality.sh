#!/usr/bin/env bash
# Weight-type quality (issue 32, item 4): perplexity and KL divergence of each quantization mix
# against the f16 weights, for brisk and for llama.cpp (npm v0.4.0, through build/llamacpp-ref),
# on brisk's four trained models (models/README.md) over their held-out KJV chapters.
#
#   make NVCC= -j2 all build/llamacpp-ref && bench/quant_quality.sh > table.md
#
# Per model: llama.cpp gathers an importance matrix (`llamacpp-ref imatrix`: llama-imatrix's
# statistics, its legacy .dat) over a calibration text of 12 training chapters (every 100th from
# the 1st; none is held out). Every mix is quantized with that one matrix by `brisk quantize`, and
# again by llama.cpp's llama_model_quantize (`llamacpp-ref quantize`): the column "= llama.cpp"
# says whether the two files hold the same tensors byte for byte (llama.cpp writes them sorted by
# name, brisk in the input's order; the tensors' bytes are compared); both engines read brisk's file
# ("its file": a LLAMA_TYPES row, llama.cpp's file). Method of
# bench/kv_quality.sh: chunks of CTX tokens (default 256, the models' training window), each from a
# cleared cache, the second half scored; f16 KV cache. Each engine's f16-weight run writes
# llama-perplexity's logits file (its PPL is the base) and every mix runs its tokens in
# KL-divergence mode against it; the script checks that the two engines' files hold the same
# tokens. Size: the file's bytes; bits per weight: tensor bytes x 8 / parameters (llama.cpp's
# model size and count). A second table lists the matrix types each file holds: these models'
# widths (128, 192, 384) are no multiple of 256, and there the mixes fall back as llama.cpp's do.
# The markdown tables go to stdout, progress to stderr. Environment: BUILD, SHARED, CTX,
# THREADS (2), CHUNKS (0: all), MODELS, TYPES, LLAMA_TYPES (either may be empty).
set -euo pipefail
NAME=quant_quality CTX_DEFAULT=256
MODELS=${MODELS:-"brisk-kjv-6m brisk-kjv-draft brisk-kjv-moe brisk-kjv-hybrid"}
# every mix brisk quantize writes that the issue lists; LLAMA_TYPES: types only llama.cpp's
# quantizer writes from a model (brisk writes TQ1_0, TQ2_0, Q1_0 and Q2_0 through synth only; NVFP4
# neither), quantized by llama.cpp alone and run by both engines
TYPES=${TYPES-"Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0 IQ4_NL IQ4_XS Q3_K_M IQ3_S IQ3_XXS Q2_K IQ2_S IQ2_XS IQ2_XXS IQ1_M IQ1_S"}
LLAMA_TYPES=${LLAMA_TYPES-"TQ2_0 TQ1_0 Q2_0 Q1_0"}
. "$(dirname "$0")/kjv_eval.sh"
for f in "$B/brisk" "$B/llamacpp-ref" "$S/data/corpus/kjv_verses.txt.gz"; do [ -e "$f" ] || die "$f missing"; done

# held out: $T/val.txt (kjv_texts); calibration: every 100th chapter from the 1st, training text
kjv_texts
chapters 0 >"$T/cal.txt"

cells() { # ppl ppl_f16 report|- : "PPL | ΔPPL | KLD | same top"
  if [ "$3" = - ]; then printf '%.4f | base | base | base' "$1"; return; fi
  printf '%.4f | %s | %s | %s%%' "$1" "$(awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.2f%%", 100 * (a / b - 1) }')" \
    "$(num "Mean    KLD" "$3" | sed 's/^-0\.0*$/0.000000/')" "$(num "Same top p" "$3")"
}
size_cells() { # model file: "MiB | bits per weight"
  "$B/llamacpp-ref" info -m "$1" 2>/dev/null >"$T/info" || die "llama.cpp cannot load $1"
  awk -v f="$(stat -c %s "$1")" '/^n_params/ { p = $2 } /^size_bytes/ { s = $2 }
    END { printf "%.2f | %.2f", f / 1048576, 8 * s / p }' "$T/info"
}
tensors() { # file: "name type bytes absolute-offset" per tensor, by name (brisk info's table)
  "$B/brisk" info "$1" | awk 'NR == 1 { for (i = 1; i < NF; i++) if ($i == "at" && $(i + 1) == "byte") d = $(i + 2) }
    $1 ~ /^[0-9]+$/ && NF >= 6 { print $2, $3, $(NF - 1), d + $NF }' | sort
}
same_tensors() { # a b: the same tensors (names, types, bytes) in any order (llama.cpp writes them by name)
  tensors "$1" >"$T/ta"; tensors "$2" >"$T/tb"
  [ -s "$T/ta" ] && cmp -s <(cut -d' ' -f1-3 "$T/ta") <(cut -d' ' -f1-3 "$T/tb") || return 1
  local n ty by oa ob
  while read -r n ty by oa ob; do cmp -s -i "$oa:$ob" -n "$by" "$1" "$2" || return 1; done < <(paste -d' ' "$T/ta" <(cut -d' ' -f4 "$T/tb"))
}
matrix_types() { # file: "type count, ..." of its matrices (tensors of 2+ dims), most first
  "$B/brisk" info "$1" | awk '$1 ~ /^[0-9]+$/ && NF >= 7 { n[$3]++ } END { for (t in n) print n[t], t }' |
    sort -k1,1rn -k2 | awk '{ printf "%s%s %d", (NR > 1 ? ", " : ""), $2, $1 }'
}

t0=$(date +%s)
: >"$T/table"; : >"$T/types"; : >"$T/cross"
for m in $MODELS; do
  M=models/$m.gguf
  [ -f "$M" ] || die "$M missing"
  echo "quant_quality: $m: imatrix" >&2
  "$B/llamacpp-ref" imatrix -m "$M" -f "$T/cal.txt" -c "$CTX" -t "$TH" -o "$T/imat.dat" >/dev/null 2>"$T/e" ||
    die "llama.cpp imatrix $m: $(tail -n1 "$T/e")"
  # the f16 bases, one per engine
  brisk_base "$M" "$m"
  llama_base "$M" "$m"
  same_tokens "$m"
  echo "| $m | F16 | $(size_cells "$M") | | $(cells "$pb" "$pb" -) | $(cells "$pl" "$pl" -) |" >>"$T/table"
  echo "| $m | F16 | $(matrix_types "$M") |" >>"$T/types"
  for t in $TYPES $LLAMA_TYPES; do
    echo "quant_quality: $m $t" >&2
    Q=$T/q.gguf
    llama_only=0; [[ " $LLAMA_TYPES " == *" $t "* ]] && llama_only=1
    if ! "$B/llamacpp-ref" quantize "$M" "$T/lq.gguf" "$t" --imatrix "$T/imat.dat" -t "$TH" >/dev/null 2>"$T/e"; then
      [ $llama_only = 1 ] || die "llama.cpp quantize $m $t: $(tail -n1 "$T/e")"
      # a type with no fallback for this width (Q1_0's 128-wide blocks on 192-wide rows): a row that says so
      echo "| $m | $t | | | refused | | | | | | | | |" >>"$T/table"
      echo "| $m | $t | llama.cpp refuses it: $(tail -n1 "$T/e" | sed 's/.*failed to quantize: //') |" >>"$T/types"
      continue
    fi
    if [ $llama_only = 1 ]; then
      same="its file"; Q=$T/lq.gguf
    else
      "$B/brisk" quantize "$M" "$Q" "$t" --imatrix "$T/imat.dat" -t "$TH" >/dev/null 2>"$T/e" ||
        die "brisk quantize $m $t: $(tail -n1 "$T/e")"
      same=yes; same_tensors "$Q" "$T/lq.gguf" || same=NO
    fi
    "$B/brisk" perplexity -m "$Q" -t "$TH" --kv-type f16 --kl-divergence --kl-divergence-base "$T/b.$m" \
      >"$T/k" 2>"$T/e" || die "brisk $m $t: $(tail -n1 "$T/e")"
    bc=$(cells "$(num "Mean PPL(Q)" "$T/k")" "$pb" "$T/k")
    "$B/llamacpp-ref" perplexity -m "$Q" -t "$TH" --kv f16 --kl-divergence --kl-divergence-base "$T/l.$m" \
      >"$T/k" 2>"$T/e" || die "llama.cpp $m $t: $(tail -n1 "$T/e")"
    lc=$(cells "$(num "Mean PPL(Q)" "$T/k")" "$pl" "$T/k")
    echo "| $m | $t | $(size_cells "$Q") | $same | $bc | $lc |" >>"$T/table"
    echo "| $m | $t | $(matrix_types "$Q") |" >>"$T/types"
  done
  cross_kld "$M" "$m"
done

cpu=$(ref_cpu)
echo "Text: the 12 held-out KJV chapters ($(wc -c <"$T/val.txt") bytes, $info, $(( ($CTX - 1 - $CTX / 2) ))" \
     "scored positions each); imatrix over 12 training chapters ($(wc -c <"$T/cal.txt") bytes, chunks of $CTX)." \
     "f16 KV cache, $TH threads; llama.cpp v0.4.0 CPU ($cpu), flash attention auto. $(( $(date +%s) - t0 )) s."
echo
echo "| model | type | MiB | bits/weight | = llama.cpp | brisk PPL | ΔPPL | mean KLD | same top | llama.cpp PPL | ΔPPL | mean KLD | same top |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
cat "$T/table"
echo
cross_line
echo
echo "| model | type | matrices (type count) |"
echo "|---|---|---|"
cat "$T/types"
