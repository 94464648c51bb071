#!/usr/bin/env python3
"""The timeline of one decode step from a trace build's records (src/backend/cuda/cuda_trace.cuh).

    make BUILD=build-trace EXTRA_NVCCFLAGS=-DBK_TRACE build-trace/brisk      (here)
    BRISK_CUDA_TRACE=/tmp/step.txt build-trace/brisk bench -m F -p 0 -n 64 -r 1
    python3 bench/cuda/trace_step.py /tmp/step.txt [--rows N]

Each launch of the step (a grid id) gets its kernel name from FILE.names (the graph's kernel
nodes in capture order, matched in order by grid size) and, in microseconds from the step's first
stamp: its blocks' first and last starts, first and last returns from pdl_wait, first and last
ends (kernels with a BK_TRACE_SCOPE, a block's end its last warp's), and the latency
from the last end of the launch before (when it has end stamps) to its first wait's return. Then
per kernel name: launches, the chain time charged to it (from its first wait's return to the next
launch's), its own mean span (first wait to last end) and mean latency. Launches that never call pdl_wait leave no stamps and are not in the table.
"""
import collections
import re
import sys


def short(name):
    m = re.match(r"_Z(\d+)(.*)", name)  # mangled: _Z <length> <name> <arguments>
    if m:
        return m.group(2)[:int(m.group(1))]
    return re.sub(r"[<(].*", "", name)


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    path, rows = args[0], 60
    if "--rows" in args:
        rows = int(args[args.index("--rows") + 1])
    grids = collections.OrderedDict()
    for line in open(path):
        p = line.split()
        if len(p) != 5:
            continue
        g, blk, _sm, kind, t = (int(x) for x in p)
        d = grids.setdefault(g, {"blocks": set(), 0: [], 1: [], 2: [], "ends": {}})
        d["blocks"].add(blk)
        if kind == 2:  # one per warp: the block ends with its last
            d["ends"][blk] = max(t, d["ends"].get(blk, t))
        else:
            d[kind].append(t)
    if not grids:
        print("no records in", path)
        return 1
    names = []
    try:
        last = None
        for line in open(path + ".names"):
            p = line.split()
            if p[0] != "graph":
                continue
            if p[1] != last:  # a new graph: the traced step replays the last one captured
                last, names = p[1], []
            names.append((int(p[5]) * int(p[6]) * int(p[7]), short(" ".join(p[10:]))))
    except OSError:
        pass
    for d in grids.values():
        d[2] = list(d["ends"].values())
    t0 = min(min(v for k in (0, 1, 2) for v in d[k]) for d in grids.values())
    order = sorted(grids.values(), key=lambda d: min(d[0] or d[1] or d[2]))
    ni = 0
    for d in order:  # names in capture order, skipping nodes that left no stamps (sizes must agree)
        d["name"] = "?"
        nb = max(d["blocks"]) + 1
        for j in range(ni, len(names)):
            if names[j][0] == nb:
                d["name"], ni = names[j][1], j + 1
                break
    us = lambda v: (v - t0) / 1000.0
    print("| # | kernel | blocks | start first-last | wait first-last | end first-last | latency after the launch before |")
    print("|---|---|---|---|---|---|---|")
    prev_end = None
    per = collections.OrderedDict()
    for i, d in enumerate(order):
        s, w, e = d[0], d[1], d[2]
        lat = (min(w) - prev_end) / 1000.0 if (w and prev_end is not None) else None
        nxt = order[i + 1] if i + 1 < len(order) else None
        w0 = min(w) if w else (min(s) if s else None)
        nxt_w0 = (min(nxt[1]) if nxt[1] else min(nxt[0] or nxt[2])) if nxt else max(max(x) for x in (s, w, e) if x)
        r = per.setdefault(d["name"], {"n": 0, "chain": 0.0, "span": 0.0, "nspan": 0, "lat": 0.0, "nlat": 0})
        r["n"] += 1
        if w0 is not None:
            r["chain"] += (nxt_w0 - w0) / 1000.0
        if e and w:
            r["span"] += (max(e) - min(w)) / 1000.0
            r["nspan"] += 1
        if lat is not None:
            r["lat"] += lat
            r["nlat"] += 1
        if i < rows:
            f = lambda x: "%.2f-%.2f" % (us(min(x)), us(max(x))) if x else ""
            print("| %d | %s | %d | %s | %s | %s | %s |" % (i, d["name"], len(d["blocks"]), f(s), f(w), f(e),
                                                            "%.2f" % lat if lat is not None else ""))
        prev_end = max(e) if e else None  # the latency only where the launch before has end stamps
    total = max(max(v for k in (0, 1, 2) for v in d[k]) for d in grids.values()) - t0
    print("\nstep: %.1f us, %d launches with stamps\n" % (total / 1000.0, len(order)))
    print("| kernel | launches | chain us (share) | mean span us | mean latency us |")
    print("|---|---|---|---|---|")
    for name, r in sorted(per.items(), key=lambda kv: -kv[1]["chain"]):
        print("| %s | %d | %.1f (%.1f%%) | %s | %s |" % (
            name, r["n"], r["chain"], 100.0 * r["chain"] * 1000.0 / total,
            "%.2f" % (r["span"] / r["nspan"]) if r["nspan"] else "",
            "%.2f" % (r["lat"] / r["nlat"]) if r["nlat"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
