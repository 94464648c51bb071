#!/usr/bin/env bash
# On the GPU machine (after bench/cuda/pack.sh here; carry [".device"]): speculative decoding on the GPU
# (issue 29), in one call:
#   1. tests/test_mtp and tests/test_eagle3 with the models on the GPU (test_mtp's gpu case: the MTP
#      head's logits against the CPU's; the greedy cases: speculative == plain, rolled back through the
#      kept recurrent inputs), tensor cores off as for make test-cuda's random-weight models;
#   2. synthetic qwen3.6-27b and qwen3.6-35b-a3b in Q4_K_M with an MTP block, `brisk synth --bigram`
#      (the head drafts the trunk's near-bigram: real acceptance on real shapes, greedy text that no
#      rounding moves), then per model: `bench --spec-replay 3:0.67` (tokens/s at 2 of 3 accepted and the
#      verify step's cost for k = 0..16), `bench --spec-mtp 3` (the head's own drafts) and
#      `bench --spec-mtp 3:0.67` (the head run each round, 2 of 3 accepted).
# Results under $OUT: log.txt (elapsed seconds per step), test_mtp.txt, test_eagle3.txt, spec-*.txt.
set -u
OUT=${OUT:-/tmp/spec}; mkdir -p "$OUT"; d=/tmp/bm
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/log.txt"; }
. bench/cuda/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/smi.txt"
for p in ${MODELS:-qwen3.6-27b qwen3.6-35b-a3b}; do
  [ -f $d/$p-mtp.gguf ] || $A synth --preset $p --vocab $d/vocab.gguf --type q4_k_m --repeat-rows 256 --mtp 1 --bigram \
    $(case $p in *a3b) echo --expert-skew 1;; esac) -o $d/$p-mtp.gguf > /dev/null 2>&1 &
done
for t in test_mtp test_eagle3; do
  BRISK_CUDA_DISABLE=mma timeout 300 $B/tests/$t > "$OUT/$t.txt" 2>&1; el "$t rc=$?"
  grep -E "^(ok|FAIL|skip)|GPU vs CPU|mtp k=|passed" "$OUT/$t.txt" | tee -a "$OUT/log.txt"
done
wait; el models
for p in ${MODELS:-qwen3.6-27b qwen3.6-35b-a3b}; do
  f=$d/$p-mtp.gguf
  for s in --spec-replay:3:0.67 --spec-mtp:3 --spec-mtp:3:0.67; do
    flag=${s%%:*} val=${s#*:}
    timeout 150 $A bench -m $f -n 128 -r 2 $flag $val > "$OUT/spec-$p${flag#--spec}-$val.txt" 2>&1
    el "$p $flag $val rc=$?"
    grep -E "^\| tg|^(mtp|replay):" "$OUT/spec-$p${flag#--spec}-$val.txt" | tee -a "$OUT/log.txt"
  done
done
el end
