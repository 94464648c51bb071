#!/usr/bin/env bash
# Rebuilds the training corpus from Debian's packages (run on a Debian machine
# with apt; the GPU machine has no package registry, so the text travels there).
#   tools/train/corpus.sh OUT_DIR      -> OUT_DIR/kjv.txt (+ kjv.sha256)
# The King James Bible is public domain; Debian ships it compressed in
# bible-kjv-text and its reader `bible` in bible-kjv (GPL-2+, used, not copied).
# Output: one verse per line with its "Book C:V " reference stripped, chapters
# separated by an empty line (the trainer turns those into document breaks).
set -euo pipefail
out=${1:?usage: corpus.sh OUT_DIR}
mkdir -p "$out"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download bible-kjv-text bible-kjv >/dev/null 2>&1) ||
  { echo "corpus.sh: apt-get download bible-kjv-text bible-kjv failed" >&2; exit 1; }
for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/root"; done
"$work/root/usr/bin/bible" -p "$work/root/usr/lib" -f 'Gen1:1-Rev22:21' > "$work/verses.txt"
n=$(wc -l < "$work/verses.txt")
[ "$n" -eq 31102 ] || { echo "corpus.sh: expected 31102 verses, got $n" >&2; exit 1; }
# "Ge1:1 text" -> text; a new chapter (verse number 1) starts a new paragraph.
awk '{ ref = $1; sub(/^[^ ]+ /, ""); split(ref, cv, ":");
       if (cv[2] == "1" && NR > 1) print ""; print }' "$work/verses.txt" > "$out/kjv.txt"
sha256sum "$work/verses.txt" | awk '{print $1 "  verses (bible -f Gen1:1-Rev22:21)"}' > "$out/kjv.sha256"
sha256sum "$out/kjv.txt" | awk '{print $1 "  kjv.txt"}' >> "$out/kjv.sha256"
echo "corpus: $n verses, $(wc -c < "$out/kjv.txt") bytes -> $out/kjv.txt"
