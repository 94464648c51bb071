#!/usr/bin/env python3
"""Decodes token ids with a byte-level BPE tokenizer.json (no pip packages), for the shell
tests that compare llama.cpp's greedy ids with brisk's text.

usage: bytelevel_decode.py TOKENIZER_JSON "ID ID ..." [--replace]
Special added tokens are dropped; the bytes are written as they are, or with --replace
invalid UTF-8 turned into U+FFFD."""
import json, sys

tj = json.load(open(sys.argv[1]))
vocab = {v: k for k, v in tj["model"]["vocab"].items()}
special = {t["id"] for t in tj["added_tokens"] if t.get("special")}
for t in tj["added_tokens"]:
    vocab[t["id"]] = t["content"]
# GPT-2's byte <-> printable-character table
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
dec = {chr(c): b for b, c in zip(bs, cs)}
out = bytearray()
for i in map(int, sys.argv[2].split()):
    s = vocab.get(i, "")
    if i not in special:
        out += bytes(dec[ch] for ch in s) if all(ch in dec for ch in s) else s.encode()
if "--replace" in sys.argv[3:]:
    out = out.decode("utf-8", errors="replace").encode()
sys.stdout.buffer.write(out)
