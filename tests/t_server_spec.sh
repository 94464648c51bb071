#!/usr/bin/env bash
# t_server_spec.sh — speculative decoding in `brisk serve` (scheduler.h: per slot, inside the
# batched step):
#  1. greedy text with speculation equals the same server without it, for several concurrent
#     streams (completions and chat, streaming and not, n = 2; a stop string with logprobs, a
#     3-token limit and a JSON grammar, which end rounds early), with ngram-simple, ngram-cache and
#     a draft model (-md brisk-kjv-draft) on brisk-kjv-6m, and with ngram-simple and the draft model
#     on brisk-kjv-hybrid (recurrent state: rejected drafts rolled back from a snapshot), and
#     --spec-type mtp on a tiny synthetic qwen35 with an MTP head (random weights: drafts are
#     verified and rejected, so only sameness and the rollback are checked), and --spec-type
#     draft-eagle3 -md on brisk synth's tiny-llama with tiny-llama-eagle3, patched as test_eagle3.c's
#     pair is (the target's LM head keeps rows 0 and 343, the drafter's row 343 negated), so that
#     several slots' rounds in one batch accept some drafts and reject others, twice (the second
#     time the slots reuse cached prompts);
#  2. on a prompt that repeats a passage drafts are proposed and accepted: the response's timings
#     carry draft_n > 0 and draft_n_accepted > 0 (non-streaming and in the last streamed chunk);
#  3. a request's "speculative.n_max": 0 opts out (no draft_n), the same text;
#  4. --draft-rows 1 (a step's rows all taken by plain tokens) turns drafting off;
#  5. /props and /slots report the speculation (llama-server's speculative and speculative.* fields),
#     /metrics its counters;
#  6. bad flags are refused with exit 2 (draft or draft-eagle3 without -md, embeddings with
#     speculation, an unknown type), mtp on a model without the head and draft-eagle3 with a file
#     that is no EAGLE-3 drafter with exit 1.
# Each server is stopped with SIGTERM and must exit 0 (under SAN=1 with no leak report).
#
# The CPU backend sums a batch of 16+ rows in another float order than a shorter one (cpu_backend.c:
# packed panels), so which rows share a step can change a greedy token, speculation or not; every
# server here keeps its steps under 16 rows (-b 3, parallel x (1 + draft-max) + 3 < 16), where a
# token's logits do not depend on the batch around it. --draft-rows 16 lets every slot draft at
# once (the default turns drafting down as slots fill; item 4 tests that cap).
set -u
BUILD=${BUILD:-build}
M=models
for f in brisk-kjv-6m brisk-kjv-draft brisk-kjv-hybrid; do
  [ -f "$M/$f.gguf" ] || { echo "skip t_server_spec.sh: $M/$f.gguf not found [required]"; exit 77; }
done
SERVER_FAIL=FAIL
. tests/server_lib.sh
N=40
[ "${SAN:-0}" = 1 ] && N=16

# start NAME MODEL ARGS...: a server of MODEL (serve_start); sets PORT and PID
start() {
  local name=$1 model=$2; shift 2
  serve_start "$name" 200 -m "$model" -t 1 -c 512 -b 3 --no-access-log "$@"
}
stop() { serve_stop "$@"; }

# The client: the same requests at once from 6 threads; writes {label: text} and the timings to $2.
cat >"$TMP/client.py" <<'PY'
import json, sys, threading, urllib.request
url, out, n, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
REP = ("And God said, Let there be light: and there was light. And God saw the light, that it was good: and God "
       "divided the light from the darkness. And God said, Let there be light: and there was light. And God saw the "
       "light, that it was good: and God divided")
jobs = [
    ("rep", "/v1/completions", {"prompt": REP}),
    ("rep-stream", "/v1/completions", {"prompt": REP, "stream": True}),
    ("gen", "/v1/completions", {"prompt": "In the beginning God created"}),
    ("chat", "/v1/chat/completions", {"messages": [{"role": "user", "content": REP}]}),
    ("chat-stream", "/v1/chat/completions", {"messages": [{"role": "user", "content": "And Jesus said"}],
                                              "stream": True}),
    ("n2", "/v1/completions", {"prompt": "Blessed are the", "n": 2}),
    # a round may end early: a stop string, a token limit inside it, a grammar that rejects drafts
    ("stop", "/v1/completions", {"prompt": REP, "stop": ["darkness"], "logprobs": 2}),
    ("short", "/v1/completions", {"prompt": REP, "max_tokens": 3}),
    ("grammar", "/v1/chat/completions", {"messages": [{"role": "user", "content": REP}],
                                          "response_format": {"type": "json_object"}}),
]
if mode == "optout":
    jobs = [(l, p, dict(b, **{"speculative.n_max": 0})) for l, p, b in jobs]
if mode == "bytes":  # a random-weight model of bytes: no chat template, no JSON
    jobs = [(l, p, b) for l, p, b in jobs if p == "/v1/completions"]
res, errs = {}, []

def run(label, path, body):
    body = dict({"max_tokens": n}, **body, temperature=0)
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            raw = r.read().decode()
    except Exception as e:  # noqa: BLE001 - any failure is a test failure
        errs.append(f"{label}: {e}")
        return
    texts, timings, lps = {}, None, None
    if body.get("stream"):
        for line in raw.splitlines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            o = json.loads(line[6:])
            timings = o.get("timings", timings)
            for c in o.get("choices", []):
                d = c.get("delta", {}).get("content") if "delta" in c else c.get("text")
                texts[c["index"]] = texts.get(c["index"], "") + (d or "")
    else:
        o = json.loads(raw)
        timings = o.get("timings")
        for c in o["choices"]:
            texts[c["index"]] = c["message"]["content"] if "message" in c else c["text"]
            lps = c.get("logprobs") and [round(x, 3) for x in c["logprobs"]["token_logprobs"]]
    res[label] = {"text": [texts[i] for i in sorted(texts)], "timings": timings, "logprobs": lps}

ts = [threading.Thread(target=run, args=j) for j in jobs]
for t in ts: t.start()
for t in ts: t.join()
json.dump({"res": res, "errs": errs}, open(out, "w"))
PY

# compare A B LABEL [accept]: the texts must match; with accept, rep must have accepted drafts
compare() {
  python3 - "$1" "$2" "$3" "${4:-}" <<'PY'
import json, sys
a, b, label, accept = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
bad = a["errs"] + b["errs"]
for k, v in a["res"].items():
    w = b["res"].get(k)
    if not w or v["text"] != w["text"]:
        bad.append(f"{k}: plain {v['text']!r} / speculative {w and w['text']!r}")
    # a recurrent state updated over several tokens in one pass (a verify step) sums in another
    # order than token by token: the hybrid's logprobs move in the third decimal, its tokens do not
    elif (v["logprobs"] is None) != (w["logprobs"] is None) or \
            any(abs(x - y) > 0.01 for x, y in zip(v["logprobs"] or [], w["logprobs"] or [])) or \
            len(v["logprobs"] or []) != len(w["logprobs"] or []):
        bad.append(f"{k}: logprobs plain {v['logprobs']} / speculative {w['logprobs']}")
    elif not any(v["text"]):
        bad.append(f"{k}: empty text")
t = b["res"].get("rep", {}).get("timings") or {}
ts = b["res"].get("rep-stream", {}).get("timings") or {}
drafted = sum((r["timings"] or {}).get("draft_n", 0) for r in b["res"].values())
if accept == "accept" and not (t.get("draft_n", 0) > 0 and t.get("draft_n_accepted", 0) > 0):
    bad.append(f"rep: no accepted drafts in timings {t}")
if accept == "accept" and not (ts.get("draft_n", 0) > 0 and "predicted_n" in ts):
    bad.append(f"rep-stream: no draft_n in the last chunk's timings {ts}")
accepted = sum((r["timings"] or {}).get("draft_n_accepted", 0) for r in b["res"].values())
if accept == "accepted" and not (drafted > accepted > 0):
    bad.append(f"drafts: {drafted} verified, {accepted} accepted (want some accepted, some rejected)")
if accept == "drafted" and not drafted:
    bad.append("no drafts were verified")
if accept == "none" and drafted:
    bad.append(f"drafts were verified ({drafted}) where none should be")
if bad:
    print(f"FAIL {label}:\n  " + "\n  ".join(bad)); sys.exit(1)
print(f"ok   {label}: {len(a['res'])} concurrent requests, same greedy text; rep timings draft_n "
      f"{t.get('draft_n', 0)}, accepted {t.get('draft_n_accepted', 0)}; all requests drafted {drafted}, "
      f"accepted {accepted}")
PY
}

fail=0
# baselines: the same servers without speculation
for m in brisk-kjv-6m brisk-kjv-hybrid; do
  start plain-$m $M/$m.gguf --parallel 4 || exit 1
  python3 "$TMP/client.py" "http://127.0.0.1:$PORT" "$TMP/plain-$m.json" $N plain || fail=1
  stop plain-$m || fail=1
done

# 1 + 2
run_spec() { # NAME MODEL ARGS...
  local name=$1 model=$2; shift 2
  start "$name" "$M/$model.gguf" "$@" || { fail=1; return; }
  python3 "$TMP/client.py" "http://127.0.0.1:$PORT" "$TMP/$name.json" $N spec &&
    compare "$TMP/plain-$model.json" "$TMP/$name.json" "$name ($model $*)" accept || fail=1
}
SP=(--parallel 4 --draft-rows 16)   # 4 x (1 + 2) + 3 rows
SD=(--parallel 3 --draft-rows 16 --draft-max 3)  # 3 x (1 + 3) + 3
run_spec simple brisk-kjv-6m "${SP[@]}" --spec-type ngram-simple
stop simple || fail=1
run_spec cache brisk-kjv-6m "${SP[@]}" --spec-type ngram-cache
stop cache || fail=1
run_spec hybrid-simple brisk-kjv-hybrid "${SP[@]}" --spec-type ngram-simple
stop hybrid-simple || fail=1
run_spec hybrid-draft brisk-kjv-hybrid "${SD[@]}" -md $M/brisk-kjv-draft.gguf --draft-p-min 0.3
stop hybrid-draft || fail=1

# 3 (opt-out), 5 (/props, /slots, /metrics) on the draft-model server
run_spec draft brisk-kjv-6m "${SD[@]}" -md $M/brisk-kjv-draft.gguf --draft-p-min 0.3
python3 "$TMP/client.py" "http://127.0.0.1:$PORT" "$TMP/optout.json" $N optout &&
  compare "$TMP/plain-brisk-kjv-6m.json" "$TMP/optout.json" "speculative.n_max 0 opts out" none || fail=1
if python3 - "http://127.0.0.1:$PORT" <<'PY'
import json, sys, urllib.request
u = sys.argv[1]
props = json.load(urllib.request.urlopen(u + "/props"))
dg = props["default_generation_settings"]
assert dg["speculative"] is True, dg
p = dg["params"]
assert p["speculative.types"] == "draft" and p["speculative.n_max"] == 3 and abs(p["speculative.p_min"] - 0.3) < 1e-6, p
slots = json.load(urllib.request.urlopen(u + "/slots"))
assert len(slots) == 3 and all(s["speculative"] is True for s in slots), slots
m = urllib.request.urlopen(u + "/metrics").read().decode()
n = [l for l in m.splitlines() if l.startswith("brisk_spec_decode_num_accepted_tokens_total")]
assert n and int(n[0].split()[-1]) > 0, n
print("ok   /props, /slots and /metrics report the speculation")
PY
then :; else echo "FAIL /props, /slots or /metrics"; fail=1; fi
stop draft || fail=1

# 1 with --spec-type mtp: a tiny synthetic qwen35 (hybrid) with an MTP head, random weights (its
# drafts are all rejected: every round is rolled back from the snapshot)
"$BUILD/brisk" synth --preset tiny-qwen35 --mtp 1 -t 1 -o "$TMP/q35mtp.gguf" >/dev/null 2>&1 || { echo "FAIL synth"; exit 1; }
start plain-mtp "$TMP/q35mtp.gguf" --parallel 3 || exit 1
python3 "$TMP/client.py" "http://127.0.0.1:$PORT" "$TMP/plain-mtp.json" $N bytes || fail=1
stop plain-mtp || fail=1
start mtp "$TMP/q35mtp.gguf" "${SD[@]}" --spec-type mtp || exit 1
python3 "$TMP/client.py" "http://127.0.0.1:$PORT" "$TMP/mtp.json" $N bytes &&
  compare "$TMP/plain-mtp.json" "$TMP/mtp.json" "mtp (tiny-qwen35 --mtp 1, ${SD[*]})" drafted || fail=1
stop mtp || fail=1
# again on synth --bigram's file, whose head's drafts are often right: rounds partly accepted, each
# slot cut back into its own rows of the shared verify pass (the kept recurrent inputs, replayed)
"$BUILD/brisk" synth --preset tiny-qwen35 --mtp 1 --bigram -t 1 -o "$TMP/q35big.gguf" >/dev/null 2>&1 ||
  { echo "FAIL synth --bigram"; exit 1; }
start plain-big "$TMP/q35big.gguf" --parallel 3 || exit 1
python3 "$TMP/client.py" "http://127.0.0.1:$PORT" "$TMP/plain-big.json" $N bytes || fail=1
stop plain-big || fail=1
start mtp-big "$TMP/q35big.gguf" "${SD[@]}" --spec-type mtp || exit 1
python3 "$TMP/client.py" "http://127.0.0.1:$PORT" "$TMP/mtp-big.json" $N bytes &&
  compare "$TMP/plain-big.json" "$TMP/mtp-big.json" "mtp (tiny-qwen35 --mtp 1 --bigram, ${SD[*]})" accepted || fail=1
stop mtp-big || fail=1

# 1 with --spec-type draft-eagle3: the EAGLE-3 pair, patched (a GGUF f32 matrix rewritten in place)
cat >"$TMP/patch.py" <<'PY'
import struct, sys
# patch.py FILE TENSOR MODE Q: keep_rows keeps rows 0 and Q, neg_row keeps row Q negated, the rest zero
path, name, mode, q = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
f = open(path, "r+b"); b = f.read(); o = 24
n_tensors, n_kv = struct.unpack_from("<QQ", b, 8)
SZ = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def take(fmt):
    global o
    v = struct.unpack_from(fmt, b, o); o += struct.calcsize(fmt); return v
def string():
    global o
    n, = take("<Q"); o += n; return b[o - n:o].decode()
def value(t):
    global o
    if t == 8: return string()
    if t == 9:
        et, n = take("<IQ"); return [value(et) for _ in range(n)]
    o += SZ[t]; return struct.unpack_from("<I", b, o - 4)[0] if t == 4 else None
align, info = 32, {}
for _ in range(n_kv):
    k = string(); t, = take("<I"); v = value(t)
    if k == "general.alignment": align = v
for _ in range(n_tensors):
    nm = string(); nd, = take("<I"); dims = take("<%dQ" % nd); t, off = take("<IQ"); info[nm] = (dims, t, off)
dims, t, off = info[name]
assert t == 0 and len(dims) == 2, (name, dims, t)  # f32
at = (o + align - 1) // align * align + off
ne0, ne1 = dims
x = struct.unpack_from("<%df" % (ne0 * ne1), b, at)
y = [0.0] * len(x)
for r in ((0, q) if mode == "keep_rows" else (q,)):
    y[r * ne0:(r + 1) * ne0] = [v if mode == "keep_rows" else -v for v in x[r * ne0:(r + 1) * ne0]]
f.seek(at); f.write(struct.pack("<%df" % len(y), *y)); f.close()
PY
"$BUILD/brisk" synth --preset tiny-llama -t 1 -o "$TMP/e3t.gguf" >/dev/null 2>&1 &&
  "$BUILD/brisk" synth --preset tiny-llama-eagle3 -t 1 -o "$TMP/e3d.gguf" >/dev/null 2>&1 &&
  python3 "$TMP/patch.py" "$TMP/e3t.gguf" output.weight keep_rows 343 &&
  python3 "$TMP/patch.py" "$TMP/e3d.gguf" output.weight neg_row 343 || { echo "FAIL the EAGLE-3 pair"; exit 1; }
# 40 tokens under SAN=1 too: a request's first 16 may all be token 0, which prints nothing
start plain-e3 "$TMP/e3t.gguf" --parallel 3 || exit 1
python3 "$TMP/client.py" "http://127.0.0.1:$PORT" "$TMP/plain-e3.json" 40 bytes || fail=1
stop plain-e3 || fail=1
start eagle3 "$TMP/e3t.gguf" "${SD[@]}" --spec-type draft-eagle3 -md "$TMP/e3d.gguf" || exit 1
python3 "$TMP/client.py" "http://127.0.0.1:$PORT" "$TMP/eagle3.json" 40 bytes &&
  compare "$TMP/plain-e3.json" "$TMP/eagle3.json" "draft-eagle3 (tiny-llama + tiny-llama-eagle3, ${SD[*]})" accepted ||
  fail=1
# the same requests again: the slots reuse their cached prompts (the drafter keeps its pairs of a prefix
# it saw, the rest is blank)
python3 "$TMP/client.py" "http://127.0.0.1:$PORT" "$TMP/eagle3b.json" 40 bytes &&
  compare "$TMP/plain-e3.json" "$TMP/eagle3b.json" "draft-eagle3 again (reused prefixes)" accepted || fail=1
stop eagle3 || fail=1
rm -f "$TMP/e3t.gguf" "$TMP/e3d.gguf"

# 4
start rows $M/brisk-kjv-6m.gguf --parallel 4 --spec-type ngram-simple --draft-rows 1 || exit 1
python3 "$TMP/client.py" "http://127.0.0.1:$PORT" "$TMP/rows.json" $N spec &&
  compare "$TMP/plain-brisk-kjv-6m.json" "$TMP/rows.json" "--draft-rows 1: no drafts" none || fail=1
stop rows || fail=1

# 6
bad() { # expected-text ARGS...
  local want=$1; shift
  "$BUILD/brisk" serve -m $M/brisk-kjv-6m.gguf --port 0 "$@" >"$TMP/bad.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q "$want" "$TMP/bad.log"; then ok_ "refused: $*"; else
    echo "FAIL serve $* gave $rc: $(cat "$TMP/bad.log")"; fail=1; fi
}
ok_() { echo "ok   $*"; }
bad "needs -md" --spec-type draft
bad "needs -md" --spec-type draft-eagle3
bad "not --embeddings" --embeddings --spec-type ngram-simple
bad "spec-type" --spec-type bogus
PORT=$(free_port)
"$BUILD/brisk" serve -m $M/brisk-kjv-6m.gguf --port "$PORT" --spec-type mtp >"$TMP/bad.log" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "no MTP head" "$TMP/bad.log" && ok_ "refused: --spec-type mtp without a head ($(tail -n1 "$TMP/bad.log"))" ||
  { echo "FAIL serve --spec-type mtp on a model without the head: rc $rc $(cat "$TMP/bad.log")"; fail=1; }
PORT=$(free_port)
"$BUILD/brisk" serve -m $M/brisk-kjv-6m.gguf --port "$PORT" --spec-type eagle3 -md $M/brisk-kjv-draft.gguf \
  >"$TMP/bad.log" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "eagle3" "$TMP/bad.log" && ok_ "refused: draft-eagle3 with a plain model as -md ($(tail -n1 "$TMP/bad.log"))" ||
  { echo "FAIL serve --spec-type eagle3 with a plain -md: rc $rc $(cat "$TMP/bad.log")"; fail=1; }
exit $fail
