#!/usr/bin/env bash
# `brisk pull`, `brisk ls`, `brisk rm` and -hf against tests/hub_server.py, a local stand-in for
# the Hugging Face hub's API (real libcurl, real HTTP): the cache layout huggingface_hub uses,
# quant picking, split files, paged trees, redirects, resumed and interrupted transfers, wrong
# checksums, 401/404/429, and rm never leaving the cache. No network beyond 127.0.0.1.
set -u
B=$(realpath "${BUILD:-build}")/brisk
S=${SHARED:-../shared}/data
M=$(realpath "$S/stories260K/stories260K.gguf")
T=$(mktemp -d)
SRV=
trap '[ -n "$SRV" ] && kill "$SRV" 2>/dev/null; rm -rf "$T"' EXIT
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }

# the fixture: one repo with two quants of one file (one blob), a split F16, an mmproj and a README
R=$T/repos/brisk-test/tiny-GGUF
mkdir -p "$R/split"
cp "$M" "$R/tiny-Q4_K_M.gguf"; cp "$M" "$R/tiny-Q8_0.gguf"
"$(dirname "$B")/tests/test_gguf" --write-split "$M" "$R/split/tiny-F16" 2 || { echo "FAIL the split fixture"; exit 1; }
printf mmproj >"$R/mmproj-tiny-F16.gguf"; echo "# tiny" >"$R/README.md"
SHA=$(sha256sum "$M" | cut -d' ' -f1)
: >"$T/ctl"; : >"$T/log"
python3 "$(dirname "$0")/hub_server.py" "$T/repos" "$T/port" "$T/log" "$T/ctl" & SRV=$!
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.1; done
unset HF_TOKEN HUGGING_FACE_HUB_TOKEN HF_HUB_CACHE HF_HUB_OFFLINE HF_TOKEN_PATH XDG_CACHE_HOME
export HF_ENDPOINT=http://127.0.0.1:$(cat "$T/port") HF_HOME=$T/hf
C=$T/hf/hub/models--brisk-test--tiny-GGUF
ctl() { printf '%s\n' "$*" >"$T/ctl"; }
fresh() { rm -rf "$T/hf"; : >"$T/log"; }   # an empty cache and log
nreq() { wc -l <"$T/log"; }

# 1. pull: the huggingface_hub layout, a relative link to a blob named by its sha256
"$B" pull brisk-test/tiny-GGUF:q4_k_m >"$T/o" 2>"$T/e"; rc=$?
COMMIT=$(cat "$C/refs/main" 2>/dev/null)
check "pull: exit 0, prints the snapshot path" \
  '[ $rc -eq 0 ] && [ "$(cat "$T/o")" = "$C/snapshots/$COMMIT/tiny-Q4_K_M.gguf" ] && [ ${#COMMIT} -eq 40 ]'
check "pull: the layout (refs/main, blobs/SHA256, snapshots/COMMIT/FILE -> ../../blobs/SHA256)" \
  '[ "$(readlink "$C/snapshots/$COMMIT/tiny-Q4_K_M.gguf")" = "../../blobs/$SHA" ] && cmp -s "$C/blobs/$SHA" "$M" &&
   [ $(ls "$C/blobs" | wc -l) -eq 1 ] && [ "$(printf %s "$COMMIT")" = "$(cat "$C/refs/main")" ]'
check "pull: the paged tree was followed, the 302 to the CDN too; not a terminal: one summary line" \
  'grep -q "tree/$COMMIT?recursive=true&cursor=" "$T/log" && grep -q "^GET /cdn/$SHA range=- .* 200" "$T/log" &&
   [ $(wc -l <"$T/e") -eq 1 ] && grep -q "tiny-Q4_K_M.gguf: 1.1 MiB in .*sha256 checked" "$T/e"'

# 2. another quant of the same bytes: one blob, nothing fetched; no quant: Q4_K_M
: >"$T/log"
"$B" pull brisk-test/tiny-GGUF:Q8_0 >"$T/o" 2>"$T/e"; rc=$?
check "pull :Q8_0 of the same bytes: the blob is shared, no download" \
  '[ $rc -eq 0 ] && [ "$(readlink "$C/snapshots/$COMMIT/tiny-Q8_0.gguf")" = "../../blobs/$SHA" ] &&
   ! grep -q "/cdn/" "$T/log" && grep -q "in the cache already" "$T/e" && [ $(ls "$C/blobs" | wc -l) -eq 1 ]'
"$B" pull brisk-test/tiny-GGUF >"$T/o" 2>/dev/null; rc=$?
check "pull without a quant: Q4_K_M (llama.cpp's default)" '[ $rc -eq 0 ] && grep -q "/tiny-Q4_K_M.gguf$" "$T/o"'

# 3. -hf on run: the cached file, no request; the same text as -m; -m and -hf together refused
greedy() { "$B" run "$@" -p "Once upon a time" -n 16 --temp 0 -t 2 2>/dev/null; }
n0=$(nreq)
greedy -hf brisk-test/tiny-GGUF:Q4_K_M >"$T/hf.txt"; rc=$?
greedy -m "$M" >"$T/m.txt"
check "run -hf: the cached model, no request to the hub, the same text as -m" \
  '[ $rc -eq 0 ] && [ -s "$T/hf.txt" ] && cmp -s "$T/hf.txt" "$T/m.txt" && [ $(nreq) -eq $n0 ]'
"$B" run -m "$M" -hf brisk-test/tiny-GGUF -p hi >/dev/null 2>"$T/e"; rc=$?
check "-m and -hf together: exit 2, one line" '[ $rc -eq 2 ] && [ $(wc -l <"$T/e") -eq 1 ] && grep -q "both" "$T/e"'
"$B" bench -hf brisk-test/tiny-GGUF:Q8_0 -p 8 -n 4 -r 1 -t 2 >"$T/o" 2>&1; rc=$?
check "bench -hf runs" '[ $rc -eq 0 ] && grep -q "tiny-Q8_0.gguf" "$T/o"'
zcat "$S/corpus/kjv_verses.txt.gz" | head -c 20000 >"$T/text.txt"
"$B" perplexity -hf brisk-test/tiny-GGUF:Q4_K_M -f "$T/text.txt" -c 64 --chunks 2 -t 2 >"$T/o" 2>&1; rc=$?
"$B" perplexity -m "$M" -f "$T/text.txt" -c 64 --chunks 2 -t 2 >"$T/o2" 2>&1
check "perplexity -hf: the -m run's figure" '[ $rc -eq 0 ] && [ "$(grep -o "PPL = [0-9.]*" "$T/o")" = "$(grep -o "PPL = [0-9.]*" "$T/o2")" ] && grep -q "PPL = " "$T/o"'
SP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$B" serve -hf brisk-test/tiny-GGUF:Q4_K_M --port "$SP" -t 1 >"$T/serve.log" 2>&1 & SPID=$!
models() { python3 -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
  "http://127.0.0.1:$SP/v1/models" 2>/dev/null; }
for _ in $(seq 100); do models >"$T/models" && break; sleep 0.1; done
kill -TERM $SPID; timeout 30 tail --pid=$SPID -f /dev/null; kill -9 $SPID 2>/dev/null; wait $SPID; rc=$?
check "serve -hf: serves it, named REPO:QUANT in /v1/models, exits 0" \
  '[ $rc -eq 0 ] && grep -q "\"brisk-test/tiny-GGUF:Q4_K_M\"" "$T/models"'
HF_HUB_OFFLINE=1 "$B" run -hf brisk-test/other-GGUF -p hi >/dev/null 2>"$T/e"; rc=$?
check "HF_HUB_OFFLINE and not cached: exit 1, says so" '[ $rc -eq 1 ] && grep -q "HF_HUB_OFFLINE" "$T/e"'

# on a terminal: a bar redrawn in place, then the summary line (script(1) gives the pull a tty)
if command -v script >/dev/null; then
  rm -rf "$C"
  script -qec "$B pull brisk-test/tiny-GGUF:Q8_0" /dev/null </dev/null >"$T/tty" 2>&1; rc=$?
  check "on a terminal: a progress bar (%, [###---], MiB/s, ETA) redrawn with \\r, then the summary" \
    '[ $rc -eq 0 ] && grep -q "$(printf "\r")" "$T/tty" && grep -aq "%.*\[#*-*\].*MiB/s ETA" "$T/tty" && grep -aq "sha256 checked" "$T/tty"'
  "$B" pull brisk-test/tiny-GGUF:Q4_K_M >/dev/null 2>&1
fi

# 4. a split GGUF (llama.cpp's gguf-split layout): both parts, in order, each as served; -hf runs it
"$B" pull brisk-test/tiny-GGUF:f16 >"$T/o" 2>"$T/e"; rc=$?
check "pull a split: both parts in order, whole" \
  '[ $rc -eq 0 ] && [ $(wc -l <"$T/o") -eq 2 ] && head -1 "$T/o" | grep -q "split/tiny-F16-00001-of-00002.gguf$" &&
   cmp -s "$(sed -n 1p "$T/o")" "$R/split/tiny-F16-00001-of-00002.gguf" &&
   cmp -s "$(sed -n 2p "$T/o")" "$R/split/tiny-F16-00002-of-00002.gguf" && grep -q "\[2/2\]" "$T/e"'
"$B" run -hf brisk-test/tiny-GGUF:F16 -p "Once upon" -n 16 --temp 0 -t 1 >"$T/o" 2>"$T/e"; rc=$?
"$B" run -m "$M" -p "Once upon" -n 16 --temp 0 -t 1 >"$T/o2" 2>/dev/null
check "run -hf on a split: the parts load as the one file they were cut from" '[ $rc -eq 0 ] && cmp -s "$T/o" "$T/o2"'

# 5. what is not there
"$B" pull brisk-test/tiny-GGUF:Q5_K_M >/dev/null 2>"$T/e"; rc=$?
check "a quant the repo lacks: exit 1, the quants it has (no mmproj)" \
  '[ $rc -eq 1 ] && grep -q "Q5_K_M" "$T/e" && grep -q "Q4_K_M, Q8_0, F16\|F16, Q4_K_M, Q8_0" "$T/e" && ! grep -qi mmproj "$T/e"'
"$B" pull brisk-test/nope-GGUF >/dev/null 2>"$T/e"; rc=$?
check "404: exit 1, one line with the status and the hub's message" \
  '[ $rc -eq 1 ] && [ $(wc -l <"$T/e") -eq 1 ] && grep -q "HTTP 404 (Repository not found)" "$T/e"'
for bad in "/etc/passwd" "../x" "a/b/c" "org/na..me" "org/name:Q4 K"; do
  n0=$(nreq); "$B" pull "$bad" >/dev/null 2>"$T/e"; rc=$?
  check "pull '$bad': exit 2, no request" '[ $rc -eq 2 ] && [ $(wc -l <"$T/e") -eq 1 ] && [ $(nreq) -eq $n0 ]'
done

# 6. 401 without a token, a wrong token refused, the right one sent to the API and the file
fresh; ctl auth
"$B" pull brisk-test/tiny-GGUF >/dev/null 2>"$T/e"; rc=$?
check "401 without HF_TOKEN: exit 1, says to set it" '[ $rc -eq 1 ] && grep -q "HTTP 401" "$T/e" && grep -q "set HF_TOKEN" "$T/e"'
HF_TOKEN=wrong "$B" pull brisk-test/tiny-GGUF >/dev/null 2>"$T/e"; rc=$?
check "401 with a wrong HF_TOKEN: exit 1, says it was refused" '[ $rc -eq 1 ] && grep -q "HF_TOKEN was refused" "$T/e"'
: >"$T/log"
HF_TOKEN=secret-token "$B" pull brisk-test/tiny-GGUF >/dev/null 2>"$T/e"; rc=$?
check "HF_TOKEN: sent on every request, the pull succeeds" \
  '[ $rc -eq 0 ] && cmp -s "$C/blobs/$SHA" "$M" && ! grep -q "auth=no" "$T/log" && grep -q "^GET /cdn/" "$T/log"'
fresh; mkdir -p "$T/hf"; echo secret-token >"$T/hf/token"
"$B" pull brisk-test/tiny-GGUF >/dev/null 2>"$T/e"; rc=$?
check "the token file \$HF_HOME/token (huggingface-cli login) is read" '[ $rc -eq 0 ]'

# 7. 429: Retry-After obeyed, then it goes on; always 429: gives up, says so
fresh; ctl "429=2"
t0=$(date +%s)
"$B" pull brisk-test/tiny-GGUF >/dev/null 2>"$T/e"; rc=$?
t1=$(date +%s)
check "429 twice: waits Retry-After, then succeeds" \
  '[ $rc -eq 0 ] && [ $(grep -c -- "-> 429" "$T/log") -eq 2 ] && [ $((t1 - t0)) -ge 2 ] && cmp -s "$C/blobs/$SHA" "$M"'
fresh; ctl 429always
"$B" pull brisk-test/tiny-GGUF >/dev/null 2>"$T/e"; rc=$?
check "429 always: exit 1 after the retries, one line" '[ $rc -eq 1 ] && [ $(wc -l <"$T/e") -eq 1 ] && grep -q "HTTP 429" "$T/e"'

# 8. a transfer cut halfway: resumed with Range in the same run
fresh; ctl cut
"$B" pull brisk-test/tiny-GGUF >/dev/null 2>"$T/e"; rc=$?
check "a cut transfer: resumed (Range: bytes=N-, 206), whole and checked" \
  '[ $rc -eq 0 ] && grep -q "^GET /cdn/$SHA range=bytes=[1-9][0-9]*- .* 206" "$T/log" && cmp -s "$C/blobs/$SHA" "$M" &&
   grep -q "1 retry" "$T/e" && [ -z "$(ls "$C/blobs" | grep incomplete)" ]'

# 9. a pull killed midway: no file where a whole one is expected; the next pull resumes
fresh; ctl stall
"$B" pull brisk-test/tiny-GGUF >/dev/null 2>&1 & P=$!
for _ in $(seq 100); do [ "$(stat -c %s "$C/blobs/$SHA.incomplete" 2>/dev/null)" = $(( $(stat -c %s "$M") / 2 )) ] && break; sleep 0.1; done
kill -9 $P; wait $P 2>/dev/null
check "killed midway: only blobs/SHA.incomplete (half), no blob, no snapshot link" \
  '[ -f "$C/blobs/$SHA.incomplete" ] && [ ! -e "$C/blobs/$SHA" ] && [ ! -e "$C/snapshots" ] && [ ! -e "$C/refs/main" ]'
"$B" ls >/dev/null 2>"$T/e"
check "ls tells of the interrupted download" 'grep -q "interrupted downloads" "$T/e"'
ctl normal; : >"$T/log"
"$B" pull brisk-test/tiny-GGUF >/dev/null 2>"$T/e"; rc=$?
check "the next pull resumes from the half, whole and checked" \
  '[ $rc -eq 0 ] && grep -q "resumed from 0.6 MiB" "$T/e" && grep -q "^GET /cdn/$SHA range=bytes=$(( $(stat -c %s "$M") / 2 ))- .* 206" "$T/log" &&
   cmp -s "$C/blobs/$SHA" "$M" && [ ! -e "$C/blobs/$SHA.incomplete" ]'

# two pulls of one file at once: the second stops at once (the partial file is locked)
fresh; mkdir -p "$C/blobs"; : >"$C/blobs/$SHA.incomplete"
flock "$C/blobs/$SHA.incomplete" sleep 5 & LP=$!
sleep 0.3
"$B" pull brisk-test/tiny-GGUF >/dev/null 2>"$T/e"; rc=$?
kill $LP; wait $LP 2>/dev/null
check "a download under way elsewhere: exit 1, says so, the partial file untouched" \
  '[ $rc -eq 1 ] && grep -q "another process is downloading" "$T/e" && [ -f "$C/blobs/$SHA.incomplete" ] && [ ! -e "$C/blobs/$SHA" ]'
: >"$T/log"; HF_HUB_OFFLINE=1 "$B" pull brisk-test/tiny-GGUF:Q8_0 >/dev/null 2>"$T/e"; rc=$?
check "pull with HF_HUB_OFFLINE, not cached: exit 1, no request" '[ $rc -eq 1 ] && grep -q "HF_HUB_OFFLINE" "$T/e" && [ $(nreq) -eq 0 ]'

# 10. a wrong checksum: nothing kept (a partial file of wrong bytes is not resumed from); then fine
fresh; ctl corrupt
"$B" pull brisk-test/tiny-GGUF >/dev/null 2>"$T/e"; rc=$?
check "wrong checksum: exit 1, says so, no blob, no partial file, no link" \
  '[ $rc -eq 1 ] && grep -q "checksum mismatch" "$T/e" && grep -q "$SHA" "$T/e" && [ -z "$(ls "$C/blobs")" ] &&
   [ ! -e "$C/snapshots" ]'
# a partial file whose server ignores Range: started over from byte 0, not appended to
mkdir -p "$C/blobs"; head -c 1000 /dev/urandom >"$C/blobs/$SHA.incomplete"; ctl norange
"$B" pull brisk-test/tiny-GGUF >/dev/null 2>"$T/e"; rc=$?
check "a server that ignores Range: the partial file is restarted, the result is whole" '[ $rc -eq 0 ] && cmp -s "$C/blobs/$SHA" "$M"'
ctl normal
# a whole partial file (killed between the last byte and the rename): checked and kept, nothing fetched
fresh; mkdir -p "$C/blobs"; cp "$M" "$C/blobs/$SHA.incomplete"
"$B" pull brisk-test/tiny-GGUF >/dev/null 2>"$T/e"; rc=$?
check "a whole partial file: checked and renamed, no download" \
  '[ $rc -eq 0 ] && cmp -s "$C/blobs/$SHA" "$M" && ! grep -q "/cdn/" "$T/log" && [ ! -e "$C/blobs/$SHA.incomplete" ]'

# 11. ls and rm
"$B" pull brisk-test/tiny-GGUF:Q8_0 >/dev/null 2>&1; "$B" pull brisk-test/tiny-GGUF:F16 >/dev/null 2>&1
"$B" ls >"$T/o" 2>"$T/e"; rc=$?
check "ls: each REPO:QUANT with its size and file count" \
  '[ $rc -eq 0 ] && grep -q "^brisk-test/tiny-GGUF:Q4_K_M .* 1.1 MiB *1  tiny-Q4_K_M.gguf$" "$T/o" &&
   grep -q "^brisk-test/tiny-GGUF:Q8_0 " "$T/o" && grep -q "^brisk-test/tiny-GGUF:F16 .* 2  split/tiny-F16-00001-of-00002.gguf$" "$T/o"'
echo keep >"$T/outside"; mkdir -p "$T/victim"; echo keep >"$T/victim/file"
ln -s "$T/victim" "$T/hf/hub/models--evil--x"
for bad in "$T/outside" "/etc/passwd" "../hub" "models--brisk-test--tiny-GGUF" "brisk-test/../../x"; do
  "$B" rm "$bad" >/dev/null 2>"$T/e"; rc=$?
  check "rm '$bad': refused, exit 2" '[ $rc -eq 2 ] && grep -q "not a model of the cache" "$T/e"'
done
"$B" rm evil/x >/dev/null 2>"$T/e"; rc=$?
check "rm of a link out of the cache: refused, what it points to untouched" \
  '[ $rc -eq 1 ] && [ -f "$T/victim/file" ] && [ -f "$T/outside" ] && [ -L "$T/hf/hub/models--evil--x" ]'
rm "$T/hf/hub/models--evil--x"
"$B" rm brisk-test/tiny-GGUF:Q4_K_M 2>"$T/e"; rc=$?
check "rm :Q4_K_M: its link goes, the blob stays for :Q8_0, which still runs" \
  '[ $rc -eq 0 ] && [ ! -e "$C/snapshots/$COMMIT/tiny-Q4_K_M.gguf" ] && [ -f "$C/blobs/$SHA" ] &&
   greedy -hf brisk-test/tiny-GGUF:Q8_0 | cmp -s - "$T/m.txt"'
"$B" rm brisk-test/tiny-GGUF:Q8_0 2>"$T/e"; rc=$?
check "rm :Q8_0: the last link to the blob: the blob goes too, the split stays" \
  '[ $rc -eq 0 ] && [ ! -e "$C/blobs/$SHA" ] && grep -q "1.1 MiB freed" "$T/e" && [ -e "$C/snapshots/$COMMIT/split/tiny-F16-00002-of-00002.gguf" ]'
"$B" rm brisk-test/tiny-GGUF:Q8_0 2>"$T/e"; rc=$?
check "rm of what is not there: exit 1" '[ $rc -eq 1 ] && grep -q "brisk ls" "$T/e"'
"$B" rm brisk-test/tiny-GGUF 2>"$T/e"; rc=$?
check "rm REPO: the whole repo goes, the cache root stays" '[ $rc -eq 0 ] && [ ! -e "$C" ] && [ -d "$T/hf/hub" ]'
"$B" ls >"$T/o" 2>"$T/e"
check "ls of an empty cache: nothing on stdout" '[ ! -s "$T/o" ] && grep -q "no models" "$T/e"'

exit $fail
