#!/usr/bin/env python3
"""One-token decode at depth on the CPU, engines alternated: a table of wall tokens/s.

For each depth and KV cache type, every engine decodes -n tokens after -d earlier positions, the
engines one after the other, for --rounds rounds; the table gives each engine's median over the
rounds and its ratio to the last engine. brisk fills the depth with blank rows (`bench
--blank-depth`: the cache's bytes are read as real ones are, no prefill is timed or run);
llama.cpp (build/llamacpp-ref bench -d, llama-bench's depth) decodes the depth's random tokens
untimed before each run, so its rows take a prefill's time more to produce, not to score.

    python3 bench/cpu_depth_ab.py --model bench/models/qwen3-0.6b-q4_0.gguf -t 2 --rounds 2 \\
        --depths 1024,4096 --kv f16,q8_0 before=/tmp/brisk_old now=build/brisk llama=build/llamacpp-ref

An engine is NAME=EXE[:VAR=VALUE...]; an EXE whose name holds "llamacpp" is driven as
build/llamacpp-ref bench (LLAMACPP_LIBDIR, default the npm package's, on LD_LIBRARY_PATH).
"""
import argparse, json, os, statistics, subprocess, sys

from cpu_time_ab import llama_env, parse_engines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("-t", type=int, default=1)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--depths", default="1024,4096", help="comma-separated")
    ap.add_argument("--kv", default="f16", help="comma-separated cache types")
    ap.add_argument("engines", nargs="+")
    a = ap.parse_args()
    base = llama_env()
    engs = parse_engines(a.engines)

    def one(exe, env, d, kv):
        brisk = "llamacpp" not in os.path.basename(exe)
        args = [exe, "bench", "-m", a.model, "-p", "0", "-n", str(a.n), "-r", "1", "-t", str(a.t), "-d", str(d)]
        args += ["--blank-depth", "--kv-type", kv, "--json"] if brisk else ["--kv", kv]
        p = subprocess.run(args, capture_output=True, text=True, env=dict(base, **env))
        if p.returncode != 0:
            sys.exit(f"failed: {' '.join(args)}\n{p.stderr[-2000:]}")
        return [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")][-1]["tps_mean"]

    rows = []
    for kv in a.kv.split(","):
        for d in [int(x) for x in a.depths.split(",")]:
            got = {name: [] for name, _, _ in engs}
            for r in range(a.rounds):
                for name, exe, env in engs:
                    got[name].append(one(exe, env, d, kv))
                print(f"  {kv} d={d} round {r + 1} (load {os.getloadavg()[0]:.1f}): " +
                      ", ".join(f"{n} {v[-1]:.2f}" for n, v in got.items()), file=sys.stderr, flush=True)
            rows.append((kv, d, {n: statistics.median(v) for n, v in got.items()}, got))
    names = [n for n, _, _ in engs]
    ref = names[-1]
    print(f"\n{os.path.basename(a.model)}, {a.t} thread(s), tg{a.n}, wall tokens/s (median of {a.rounds}; "
          f"the runs in brackets), ratio to {ref}\n")
    print("| KV | depth | " + " | ".join(names) + " | " + " | ".join(f"{n} / {ref}" for n in names[:-1]) + " |")
    print("|---|---|" + "---|" * (2 * len(names) - 1))
    for kv, d, med, got in rows:
        cells = [f"{med[n]:.2f} ({', '.join(f'{x:.1f}' for x in got[n])})" for n in names]
        ratios = [f"{med[n] / med[ref]:.2f}x" if med[ref] > 0 else "-" for n in names[:-1]]
        print(f"| {kv} | {d} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
