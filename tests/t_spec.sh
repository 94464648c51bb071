#!/usr/bin/env bash
# n-gram self-speculation (brisk run --spec-type ngram-simple|ngram-cache, engine/drafter.h) and
# brisk bench --spec-replay:
#  1. greedy text with each n-gram drafter equals plain greedy decoding, token for token, on
#     stories260K (f32) and brisk's dense, MoE and hybrid (recurrent, rolled back from a
#     checkpoint) KJV models, on prompts where the drafters do propose (asserted: rounds with
#     proposals > 0, so the verify and cut-back paths ran);
#  2. on a prompt that repeats a passage, drafts are accepted (accepted > 0; the stats are printed);
#  3. bench --spec-replay 8:0.5 accepts about half of what it proposes (45..55%) and ~5 tokens a
#     target step, and prints the verify cost for k = 0..16;
#  4. bad flags are refused with exit 2;
#  5. --spec-type mtp (the model's own multi-token-prediction head) on brisk synth's tiny qwen35 and
#     qwen35moe with an MTP block: the same greedy text as plain decoding, its stats line printed;
#     bench --spec-mtp 3 checks the same and prints the acceptance, and --spec-mtp 3:0.67 (the head
#     run each round, the replay's proposals verified) accepts exactly 2 of 3; on `synth --bigram`'s
#     file the head's own drafts are accepted a quarter of the time or more; a model without the head is
#     refused with a message (exit 1). Acceptance itself is tested in tests/test_mtp.c.
#  6. --spec-type draft-eagle3 -md (an EAGLE-3 drafter) on brisk synth's tiny-llama and
#     tiny-llama-eagle3: the same greedy text as plain decoding, its stats line printed; bench
#     --spec-eagle3 3 -md checks the same; without -md, or with a file that is no EAGLE-3 drafter,
#     refused with a message. Acceptance and llama.cpp's logits: tests/test_eagle3.c, test_conformance.c.
set -u
B=${BUILD:-build}
S=${SHARED:-../shared}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
no() { echo "FAIL $*"; fail=1; }
ST=$S/data/stories260K/stories260K.gguf
[ -f "$ST" ] || { echo "skip t_spec.sh: $ST not found [required]"; exit 77; }
N=64
[ "${SAN:-0}" = 1 ] && N=24
REP="And God said, Let there be light: and there was light. And God saw the light, that it was good: and God \
divided the light from the darkness. And God said, Let there be light: and there was light. And God saw the \
light, that it was good: and God divided"
# a drafter's stats line: "<type>: R rounds (D with proposals), P proposed, A accepted (..%), ..."
field() { sed -n "s/.* \([0-9]*\) $1.*/\1/p" "$T/se" | tail -n1; }

# 1 + 2
check() { # model prompt label [tokens]
  local a b n=${4:-$N}
  a=$("$B/brisk" run -m "$1" -p "$2" -n $n --temp 0 -t 1 2>/dev/null)
  for st in ngram-simple ngram-cache; do
    b=$("$B/brisk" run -m "$1" -p "$2" -n $n --temp 0 -t 1 --spec-type $st 2>"$T/se")
    local d ac
    d=$(sed -n 's/.*(\([0-9]*\) with proposals).*/\1/p' "$T/se"); ac=$(field accepted)
    if [ -n "$a" ] && [ "$a" = "$b" ] && [ "${d:-0}" -gt 0 ]; then
      ok "$3 $st: same greedy text; $(grep proposals "$T/se")"
    else no "$3 $st: plain '$a' / speculative '$b' ($(tail -n1 "$T/se"))"; fi
    if [ "$3" != stories260K ]; then
      [ "${ac:-0}" -gt 0 ] && ok "$3 $st: repeated passage, $ac drafts accepted" || no "$3 $st: nothing accepted"
    fi
  done
}
check "$ST" "Once upon a time" stories260K $((N * 3))  # its stories repeat themselves after ~100 tokens
for m in brisk-kjv-6m brisk-kjv-moe brisk-kjv-hybrid; do check models/$m.gguf "$REP" $m; done

# 3
if "$B/brisk" bench -m "$ST" -t 1 -n 96 -r 2 --spec-replay 8:0.5 > "$T/bo" 2>&1 &&
   python3 - "$T/bo" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"replay: (\d+) rounds, (\d+) proposed, (\d+) accepted", t)
r, p, a = map(int, m.groups())
assert 0.45 <= a / p <= 0.55, (a, p)
step = float(re.search(r"tg replay k8 match 4 +\| [^|]+\| +([0-9.]+)", t).group(1))
assert 4.0 <= step <= 5.0, step
rows = re.findall(r"^\| (\d+) +\| +([0-9.]+) \|", t, re.M)
assert [int(k) for k, _ in rows] == list(range(17)), rows
PY
then ok "bench --spec-replay 8:0.5: $(grep '^replay' "$T/bo")"; else no "bench --spec-replay: $(cat "$T/bo")"; fi

# 4
for bad in "--spec-type bogus" "--spec-type draft" "--draft-min 65"; do
  # shellcheck disable=SC2086
  "$B/brisk" run -m "$ST" -p "Once" -n 2 $bad >/dev/null 2>"$T/se"
  rc=$?
  [ $rc -eq 2 ] && ok "run $bad: refused ($(cat "$T/se"))" || no "run $bad: rc $rc"
done
"$B/brisk" bench -m "$ST" --spec-replay 8:1.5 >/dev/null 2>"$T/se"
rc=$?
[ $rc -eq 2 ] && ok "bench --spec-replay 8:1.5: refused" || no "bench --spec-replay 8:1.5: rc $rc"
# 5
for p in tiny-qwen35 tiny-qwen35moe; do
  "$B/brisk" synth --preset $p --mtp 1 -t 2 -o "$T/$p-mtp.gguf" 2>/dev/null || no "synth --preset $p --mtp 1"
  a=$("$B/brisk" run -m "$T/$p-mtp.gguf" -p "Once upon a time" -n 24 --temp 0 -t 2 2>/dev/null)
  b=$("$B/brisk" run -m "$T/$p-mtp.gguf" -p "Once upon a time" -n 24 --temp 0 -t 2 --spec-type mtp 2>"$T/se")
  if [ -n "$a" ] && [ "$a" = "$b" ] && grep -q '^mtp: [0-9]* rounds' "$T/se"; then
    ok "$p mtp: same greedy text; $(grep '^mtp:' "$T/se")"
  else no "$p mtp: plain '$a' / speculative '$b' ($(tail -n2 "$T/se"))"; fi
done
if "$B/brisk" bench -m "$T/tiny-qwen35-mtp.gguf" -t 2 -n 24 -r 1 --spec-mtp 3 > "$T/bo" 2>&1 &&
   grep -q "greedy tokens equal to plain decoding's" "$T/bo"; then ok "bench --spec-mtp 3: $(grep '^mtp:' "$T/bo")"
else no "bench --spec-mtp: $(cat "$T/bo")"; fi
# synth --bigram: its MTP block drafts the trunk's near-bigram, so a good share is accepted (about half)
"$B/brisk" synth --preset tiny-qwen35 --mtp 1 --bigram -o "$T/bigram.gguf" > /dev/null 2>&1
if "$B/brisk" bench -m "$T/bigram.gguf" -t 2 -n 48 -r 1 --spec-mtp 3 > "$T/bo" 2>&1 &&
   grep -q "greedy tokens equal to plain decoding's" "$T/bo" &&
   awk '/^mtp:/{p=$4; a=$6; exit !(p > 0 && 4 * a >= p)}' "$T/bo"; then
  ok "synth --bigram, bench --spec-mtp 3: $(grep '^mtp:' "$T/bo")"
else no "synth --bigram, bench --spec-mtp 3 (want >= 25% accepted): $(cat "$T/bo")"; fi
# K:RATE: the head runs each round, the proposals are the replay's (2 of 3 right): exactly 2/3 accepted
if "$B/brisk" bench -m "$T/tiny-qwen35-mtp.gguf" -t 2 -n 24 -r 1 --spec-mtp 3:0.67 > "$T/bo" 2>&1 &&
   grep -q "tg mtp k3 match 2 " "$T/bo" && grep -q "greedy tokens equal to plain decoding's" "$T/bo" &&
   awk '/^mtp:/{p=$4; a=$6; exit !(p > 0 && 3 * a == 2 * p)}' "$T/bo"; then
  ok "bench --spec-mtp 3:0.67: $(grep '^mtp:' "$T/bo")"
else no "bench --spec-mtp 3:0.67: $(cat "$T/bo")"; fi
"$B/brisk" run -m "$ST" -p "Once" -n 2 --spec-type mtp >/dev/null 2>"$T/se"
rc=$?
[ $rc -eq 1 ] && grep -q "multi-token prediction" "$T/se" && ok "run --spec-type mtp without a head: refused ($(cat "$T/se"))" ||
  no "run --spec-type mtp on stories260K: rc $rc ($(cat "$T/se"))"
"$B/brisk" synth --preset tiny-llama -t 2 -o "$T/e3t.gguf" 2>/dev/null || no "synth --preset tiny-llama"
"$B/brisk" synth --preset tiny-llama-eagle3 -t 2 -o "$T/e3d.gguf" 2>/dev/null || no "synth --preset tiny-llama-eagle3"
a=$("$B/brisk" run -m "$T/e3t.gguf" -p "Once upon a time" -n 24 --temp 0 -t 2 2>/dev/null)
b=$("$B/brisk" run -m "$T/e3t.gguf" -md "$T/e3d.gguf" -p "Once upon a time" -n 24 --temp 0 -t 2 \
    --spec-type draft-eagle3 2>"$T/se")
if [ -n "$a" ] && [ "$a" = "$b" ] && grep -q '^draft-eagle3: [0-9]* rounds ([1-9]' "$T/se"; then
  ok "eagle3: same greedy text; $(grep '^draft-eagle3:' "$T/se")"
else no "eagle3: plain '$a' / speculative '$b' ($(tail -n2 "$T/se"))"; fi
if "$B/brisk" bench -m "$T/e3t.gguf" -md "$T/e3d.gguf" -t 2 -n 24 -r 1 --spec-eagle3 3 > "$T/bo" 2>&1 &&
   grep -q "greedy tokens equal to plain decoding's" "$T/bo"; then ok "bench --spec-eagle3 3: $(grep '^eagle3:' "$T/bo")"
else no "bench --spec-eagle3: $(cat "$T/bo")"; fi
"$B/brisk" run -m "$T/e3t.gguf" -p "Once" -n 2 --spec-type eagle3 >/dev/null 2>"$T/se"
rc=$?
[ $rc -eq 2 ] && grep -q "needs -md" "$T/se" && ok "eagle3 without -md: refused" || no "eagle3 without -md: rc $rc"
"$B/brisk" run -m "$T/e3t.gguf" -md "$T/e3t.gguf" -p "Once" -n 2 --spec-type eagle3 >/dev/null 2>"$T/se"
rc=$?
[ $rc -eq 1 ] && grep -q "eagle3" "$T/se" && ok "eagle3 with a plain model as drafter: refused ($(cat "$T/se"))" ||
  no "eagle3 with a plain model as drafter: rc $rc ($(cat "$T/se"))"
exit $fail
