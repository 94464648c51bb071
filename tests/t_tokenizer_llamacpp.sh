#!/usr/bin/env bash
# Tokenizer conformance against llama.cpp itself: `brisk tokenize` and
# `llamacpp-ref tokenize` on tests/data/multilingual.txt (and each of its
# lines) for the six llama.cpp vocabs, with and without --add-special
# --parse-special; the id lists must be identical.
set -u
BUILD=${BUILD:-build}
SHARED=${SHARED:-$(cd .. && pwd)/shared}
# exit 77: skipped (tests/run.sh); the switch takes exactly 1, any other value but 0 is a mistake
case ${BRISK_NO_LLAMACPP:-0} in
  0) ;;
  1) echo "skip all: BRISK_NO_LLAMACPP=1"; exit 77 ;;
  *) echo "BRISK_NO_LLAMACPP=$BRISK_NO_LLAMACPP: this switch takes 1 (tests off) or 0 (on)"; exit 1 ;;
esac
for tool in "$BUILD/brisk" "$BUILD/llamacpp-ref"; do
  [ -x "$tool" ] || { echo "missing $tool (make all $BUILD/llamacpp-ref)"; exit 1; }
done
text=tests/data/multilingual.txt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# every line alone as well as the whole text
# (under the sanitizers, only the whole text: each run reloads a 150k-token vocab)
[ "${SAN:-0}" = 1 ] || split -l 1 -d -a 3 "$text" "$tmp/line."
fail=0; n=0
for v in llama-spm phi-3 gpt-2 qwen2 llama-bpe qwen35; do
  m="$SHARED/data/llama.cpp-vocab/ggml-vocab-$v.gguf"
  for flags in "" "--add-special --parse-special"; do
    for f in "$text" "$tmp"/line.*; do
      [ -f "$f" ] || continue
      n=$((n + 1))
      # shellcheck disable=SC2086
      a=$("$BUILD/brisk" tokenize -m "$m" $flags < "$f" 2>&1) || { echo "brisk failed on $v: $a"; fail=$((fail+1)); continue; }
      # shellcheck disable=SC2086
      b=$("$BUILD/llamacpp-ref" tokenize -m "$m" $flags < "$f" 2>&1) || { echo "llamacpp-ref failed on $v: $b"; fail=$((fail+1)); continue; }
      if [ "$a" != "$b" ]; then
        fail=$((fail + 1))
        echo "DIFF $v ${flags:-(plain)} $(basename "$f"): $(head -c 80 "$f" | tr '\n' ' ')"
        diff <(tr ' ' '\n' <<<"$a") <(tr ' ' '\n' <<<"$b") | head -6
      fi
    done
  done
done
echo "tokenizer vs llama.cpp: $((n - fail))/$n identical"
[ $fail -eq 0 ]
