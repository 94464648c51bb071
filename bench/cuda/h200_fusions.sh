#!/usr/bin/env bash
# On the GPU machine (after bench/cuda/pack.sh here): the one-token fusions of the hybrid decode step
# checked and timed, each against its A/B knob (BRISK_CUDA_DISABLE=name):
#   gd_conv    the short conv before it in the same launch (clusters of a key head's blocks)
#   attn_gate  the gated attention's output gate in the decode attention's store
#   attn_rope  one token's QK-norm, rope and cache write in the decode attention's launch
# The op tests first, each under a time limit (bit for bit against the unfused ops; a cluster kernel
# that hung would otherwise hold the machine: if the conv's test fails or times out, the rest runs
# with gd_conv off), the tiny MoE and hybrid models end to end, then qwen3.6-27b and
# qwen3.6-35b-a3b, or the presets named as arguments (qwen3-8b, qwen3-30b-a3b: `bash h200_fusions.sh
# qwen3-8b qwen3-30b-a3b`; Q4_K_M, --repeat-rows 256; the MoE with --expert-skew 1): tg128 with each
# fusion on and off, and the greedy text of 48 tokens fused against unfused (must be equal: the same
# arithmetic). MEMCHECK=1: compute-sanitizer's memcheck on the fused ops' tests after.
set -u
d=/tmp/fz; . bench/cuda/device_env.sh
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
timeout 120 $B/tests/test_cuda_ops ssm > /tmp/ssm.txt 2>&1
if ! grep -qx "ok   ssm" /tmp/ssm.txt; then
  echo "ssm op test failed or timed out; the rest with gd_conv off"; tail -5 /tmp/ssm.txt
  OFF0=gd_conv, # (every knob below then adds to it: the list is one variable)
fi
grep -E "^ok|^FAIL|differ" /tmp/ssm.txt
if [ -z "${SKIP_OPS:-}" ]; then # SKIP_OPS=1: straight to the models after the ssm test (a second call)
timeout 300 $B/tests/test_cuda_ops attention attention_kv_fused matmul_stream matmul_swiglu 2>&1 | grep -E "^ok|^FAIL|differ" | head
[ -f .device/mmvs_lab.xz ] && xz -dc .device/mmvs_lab.xz > /tmp/mmvs_lab && chmod +x /tmp/mmvs_lab
if [ -x /tmp/mmvs_lab ]; then # the products back to back
  timeout 240 /tmp/mmvs_lab 2>&1 | tail -25
fi
M2=
for p in tiny-qwen3moe tiny-qwen35 tiny-qwen35moe tiny-qwen3next; do
  $A synth --preset $p -o $d/$p.gguf > /dev/null 2>&1 && M2="$M2 $d/$p.gguf"; done
BRISK_E2E_MODELS="${M2# }" BRISK_E2E_MODEL=.device/stories260K.gguf timeout 300 $B/tests/test_cuda_ops \
  end_to_end_models 2>&1 | grep -E "^ok|^FAIL|differ|passed"
fi
el ops
tg() { echo "$1 $2: $(env $2 $A bench -m $M -p 0 -n 128 -r 2 2>&1 | grep -E '^\| *tg')"; }
same() {
  a=$(env $X $A run -m $M -p "Once upon a time" -n 48 --temp 0 --ignore-eos 2>/dev/null | md5sum)
  b=$(env $1 $A run -m $M -p "Once upon a time" -n 48 --temp 0 --ignore-eos 2>/dev/null | md5sum)
  echo "$P greedy 48 tokens fused / $1: ${a%% *} / ${b%% *} $([ "$a" = "$b" ] && echo SAME || echo DIFFER)"
}
MODELS=${*:-qwen3.6-27b qwen3.6-35b-a3b}
for P in $MODELS; do
  M=$d/$P.gguf
  $A synth --preset $P --vocab $d/vocab.gguf --type q4_k_m --repeat-rows 256 \
    $(case $P in *a3b) echo --expert-skew 1 ;; esac) -o $M 2>&1 | tail -1
  BRISK_CUDA_GRAPH_INFO=1 $A bench -m $M -p 0 -n 4 -r 1 2>&1 | grep "graph:" | sort | uniq -c
  case $P in
    qwen3.6*) K="BRISK_CUDA_DISABLE=${OFF0:-}gd_conv BRISK_CUDA_DISABLE=${OFF0:-}attn_gate BRISK_CUDA_DISABLE=${OFF0:-}attn_rope" ;;
    *) K="BRISK_CUDA_DISABLE=${OFF0:-}attn_rope" ;;
  esac
  K=${FUSE_KNOBS:-$K} # (FUSE_KNOBS: the knobs to A/B instead)
  X=BRISK_CUDA_DISABLE=${OFF0:-}
  for v in $X $K $X; do tg $P $v; done
  for k in $K; do same $k; done
  if [ $P = qwen3.6-35b-a3b ] && [ -f .device/stats16.json ]; then # expert offload at 16 GB
    for v in $X BRISK_CUDA_DISABLE=gd_conv,attn_gate,attn_rope; do
      echo "$P --gpu-mem 16G $v: $(env $v $A bench -m $M -p 0 -n 128 -r 2 --gpu-mem 16G --expert-stats \
        .device/stats16.json --cache-experts auto 2>&1 | grep -E '^\| *tg')"; done
  fi
  rm -f $M; el $P
done
el fusions-done
if [ -n "${MEMCHECK:-}" ] && { command -v compute-sanitizer > /dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; }; then
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  timeout 300 $CS --tool memcheck $B/tests/test_cuda_ops ssm attention_kv_fused 2>&1 | tail -3
  el memcheck
fi
