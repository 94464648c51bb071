#!/usr/bin/env bash
# Smoke test of the llama.cpp reference harness (build/llamacpp-ref):
# greedy decoding of stories260K from BOS must give the ids of our independent
# reference (shared/data/stories260K/greedy_bos_256.json), also after a pure
# Q8_0 quantization and from brisk's split of the file into three parts (the
# same logits, bit for bit), and the tokenizer must match a known SentencePiece case.
set -eu
BUILD=${BUILD:-build}
SHARED=${SHARED:-$(cd .. && pwd)/shared}
REF=$BUILD/llamacpp-ref
DATA=$SHARED/data/stories260K
MODEL=$DATA/stories260K.gguf
N=64
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The first "ids" array of the JSON (the top-level one), one line, space separated.
want=$(tr -d ' \n' < "$DATA/greedy_bos_256.json" | grep -o '"ids":\[[0-9,]*\]' | head -n1 |
       sed 's/.*\[//; s/\]//' | tr ',' '\n' | head -n $N | paste -sd' ')
[ -n "$want" ] || { echo "cannot read ids from $DATA/greedy_bos_256.json"; exit 1; }

check() { # name got
    if [ "$2" != "$want" ]; then
        echo "$1: greedy ids differ"; echo "  want: $want"; echo "  got:  $2"; exit 1
    fi
}

got=$("$REF" eval -m "$MODEL" -p 1 -n $N -t 1 --kv f32 --logits-out "$tmp/logits.bin")
check "F32" "$got"
size=$(wc -c < "$tmp/logits.bin")
[ "$size" -eq $((8 + N * 512 * 4)) ] || { echo "logits file has $size bytes"; exit 1; }

"$REF" quantize "$MODEL" "$tmp/q8.gguf" Q8_0 --pure -t 1 2> "$tmp/quantize.log" ||
    { cat "$tmp/quantize.log"; exit 1; }
got=$("$REF" eval -m "$tmp/q8.gguf" -p 1 -n $N -t 1)
check "Q8_0" "$got"

# brisk's split files (test_gguf --write-split, llama.cpp's gguf-split layout) are what llama.cpp reads
"$BUILD/tests/test_gguf" --write-split "$MODEL" "$tmp/split" 3 > /dev/null
got=$("$REF" eval -m "$tmp/split-00001-of-00003.gguf" -p 1 -n $N -t 1 --kv f32 --logits-out "$tmp/split.bin")
check "split F32" "$got"
cmp -s "$tmp/logits.bin" "$tmp/split.bin" || { echo "split: llama.cpp's logits differ from the whole file's"; exit 1; }

got=$(printf 'Hello world' | "$REF" tokenize -m "$MODEL")
[ "$got" = "346 306 414 263 304 341" ] || { echo "tokenize 'Hello world': got '$got'"; exit 1; }
echo "ok"
