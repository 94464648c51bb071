#!/usr/bin/env python3
"""Cuts device code out of brisk's CUDA sources for the CPU emulators (dev/kernels/*_emu.sh):
   emu_cut.py OUT FILE START END [FILE START END ...]
writes to OUT, in order, each FILE's text from START up to the first END after it (END excluded)."""
import sys

out, args = sys.argv[1], sys.argv[2:]
if not args or len(args) % 3:
    sys.exit("usage: emu_cut.py OUT FILE START END [FILE START END ...]")
text = ""
for i in range(0, len(args), 3):
    path, start, end = args[i:i + 3]
    s = open(path).read()
    a = s.index(start)
    text += s[a:s.index(end, a)]
open(out, "w").write(text)
