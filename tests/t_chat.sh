#!/usr/bin/env bash
# `brisk chat`: conversations piped in, greedy, on brisk's own ChatML models (a transformer and a
# hybrid DeltaNet one). The KV cache kept across turns must give the answer that a fresh prefill of
# the whole conversation gives, while prefilling only the new turn.
set -u
B=${BUILD:-build}/brisk
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
# the last prompt brisk chat -v printed to stderr file $1, exactly (the line after it is its own)
last_prompt() {
  awk '/^--- prompt ---$/{p=1;s="";next} /^--- end of prompt ---$/{p=0;last=s;next} p{s=s $0 "\n"} END{printf "%s", last}' "$1" |
    head -c -1
}
# "chat: prompt N tokens, R from the cache, P prefilled ..." -> field: 1 N, 2 R, 3 P, of turn $2
stat() { grep "^chat: prompt" "$1" | sed -n "$2p" | sed 's/^chat: prompt \([0-9]*\) tokens, \([0-9]*\) from the cache, \([0-9]*\) prefilled.*/\1 \2 \3/' | cut -d' ' -f"$3"; }
G="--temp 0 -n 16 -v"

for M in models/brisk-kjv-6m.gguf models/brisk-kjv-hybrid.gguf; do
  n=$(basename "$M" .gguf)
  printf 'In the beginning\n/save %s\nAnd God said\n' "$T/c1.json" |
    $B chat -m "$M" $G -sys "You are a scribe." >"$T/a" 2>"$T/ae"; rc=$?
  check "$n: two turns piped in, exit 0 at the end of input" '[ $rc -eq 0 ] && [ $(grep -c "^chat: prompt" "$T/ae") -eq 2 ]'
  check "$n: -sys is the rendered prompt's system message" \
    'grep -q "^<|im_start|>system$" "$T/ae" && grep -q "^You are a scribe\.<|im_end|>$" "$T/ae"'
  n1=$(stat "$T/ae" 1 1); p1=$(stat "$T/ae" 1 3); n2=$(stat "$T/ae" 2 1); r2=$(stat "$T/ae" 2 2); p2=$(stat "$T/ae" 2 3)
  check "$n: turn 1 prefills all $n1 tokens; turn 2 reuses the cache ($r2 of $n2) and prefills the rest ($p2)" \
    '[ "$p1" = "$n1" ] && [ "$r2" -ge "$n1" ] && [ $((r2 + p2)) -eq "$n2" ] && [ "$p2" -lt $((n2 - n1)) ]'
  # a fresh chat: the saved conversation loaded, the same second message, everything prefilled
  printf '/load %s\n/save %s\nAnd God said\n' "$T/c1.json" "$T/c2.json" | $B chat -m "$M" $G >"$T/b" 2>"$T/be"; rc=$?
  check "$n: /load then the same turn: all prefilled, the same answer as with the cache" \
    '[ $rc -eq 0 ] && [ "$(stat "$T/be" 1 2)" = 0 ] && [ -s "$T/b" ] && tail -c $(wc -c <"$T/b") "$T/a" | cmp -s - "$T/b"'
  check "$n: /save after /load writes the same file" 'cmp -s "$T/c1.json" "$T/c2.json" && grep -q "\"role\":.*\"assistant\"" "$T/c1.json"'
  last_prompt "$T/ae" >"$T/p.txt"
  $B run -m "$M" -f "$T/p.txt" --temp 0 -n 16 >"$T/r" 2>/dev/null
  check "$n: brisk run on turn 2's rendered prompt gives turn 2's answer" 'cmp -s "$T/r" "$T/b"'
  # a history that diverges inside turn 1's answer: the hybrid model restarts from the checkpoint
  # CKPT_MARGIN tokens before turn 1's prompt ended, the other keeps the whole common prefix
  python3 -c '
import json, sys
c = json.load(sys.stdin); c["messages"][-1]["content"] = "Amen."; json.dump(c, open(sys.argv[1], "w"))' "$T/edit.json" <"$T/c1.json"
  printf 'In the beginning\n/load %s\nAnd God said\n' "$T/edit.json" | $B chat -m "$M" $G -sys "You are a scribe." >"$T/c" 2>"$T/ce"
  printf '/load %s\nAnd God said\n' "$T/edit.json" | $B chat -m "$M" $G >"$T/d" 2>/dev/null
  r=$(stat "$T/ce" 2 2)
  if [ "$n" = brisk-kjv-hybrid ]; then
    check "$n: an edited answer: turn 2 restarts from the checkpoint at $((n1 - 4)) (reused $r)" '[ "$r" = $((n1 - 4)) ]'
  else
    check "$n: an edited answer: turn 2 keeps the common prefix, past turn 1's prompt (reused $r)" '[ "$r" -ge "$n1" ]'
  fi
  check "$n: ... and answers as a fresh chat does" '[ -s "$T/d" ] && tail -c $(wc -c <"$T/d") "$T/c" | cmp -s - "$T/d"'
done

M=models/brisk-kjv-6m.gguf
printf 'In the beginning\n' | $B chat -m "$M" $G -sys "You are a scribe." >"$T/a" 2>/dev/null
printf 'In the beginning\n' | $B run -cnv -m "$M" $G -sys "You are a scribe." >"$T/o" 2>"$T/e"; rc=$?
check "run -cnv is chat" '[ $rc -eq 0 ] && [ -s "$T/o" ] && cmp -s "$T/a" "$T/o"'
printf 'line one \\\nline two\n"""\nblock one\nblock two\n"""\n' | $B chat -m "$M" $G >/dev/null 2>"$T/e"
check "a line ending in \\ continues; \"\"\" blocks" \
  'grep -q "^line one $" "$T/e" && grep -q "^line two<|im_end|>$" "$T/e" && grep -q "^block two<|im_end|>$" "$T/e"'
printf '/clear\n/nope\n//x\n/save\n' | $B chat -m "$M" $G >/dev/null 2>"$T/e"; rc=$?
check "/clear, an unknown /command said in one line, // escapes, /save without a file" \
  '[ $rc -eq 0 ] && grep -q "conversation cleared" "$T/e" && grep -q "^brisk: unknown command .\/nope." "$T/e" &&
   grep -q "^/x<|im_end|>$" "$T/e" && grep -q "^brisk: /save needs a file name" "$T/e"'
echo '{"messages": 3}' >"$T/bad.json"
printf '/load %s\n/load %s\n' "$T/bad.json" "$T/none.json" | $B chat -m "$M" $G >/dev/null 2>"$T/e"; rc=$?
check "/load of a bad or missing file: one line each, the chat goes on" '[ $rc -eq 0 ] && [ $(grep -c "^brisk: " "$T/e") -eq 2 ]'
printf 'In the beginning\n' | $B chat -m "$M" --temp 0 -r "the" -v >"$T/o" 2>/dev/null
check "-r stops the answer once the text appears" '[ "$(grep -o the "$T/o" | wc -l)" -eq 1 ] && tail -1 "$T/o" | grep -q "the$"'
printf 'In the beginning\n' | $B run -m "$M" -p "In the beginning" --temp 0 -n 64 -r "God" >"$T/o" 2>/dev/null
check "run -r too" 'grep -q "God$" "$T/o" && ! grep -q "God.*God" "$T/o"'

# Ctrl-C: stops the answer, not the chat; twice at the prompt exits
mkfifo "$T/in"
$B chat -m "$M" --temp 0 -c 4096 -v <"$T/in" >"$T/o" 2>"$T/e" & pid=$!
exec 3>"$T/in"
echo "In the beginning" >&3
sleep 1; kill -INT $pid; sleep 0.5
kill -0 $pid 2>/dev/null; alive=$?
printf '/save %s\n' "$T/i.json" >&3; sleep 0.5
kill -INT $pid; sleep 0.2; kill -INT $pid
for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 $pid 2>/dev/null || break; sleep 0.2; done
kill -0 $pid 2>/dev/null; gone=$?
exec 3>&-
wait $pid; rc=$?
check "Ctrl-C during an answer stops it and the chat goes on; twice at the prompt exits 0" \
  '[ $alive -eq 0 ] && [ $gone -ne 0 ] && [ $rc -eq 0 ] && grep -q "(interrupted)" "$T/e" && grep -q "(Ctrl-C again" "$T/e" &&
   [ "$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))[\"messages\"]))" "$T/i.json")" = 2 ]'
exit $fail
