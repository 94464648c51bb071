#!/usr/bin/env python3
"""CPU benchmark: brisk vs llama.cpp (npm v0.4.0 through build/llamacpp-ref), side by side.

For every model and thread count, the two engines run alternately (brisk, llama.cpp,
brisk, llama.cpp, ...) so that both see the same machine state, each with -p/-n/-r as
given; the table reports mean tokens/s, the ratio brisk/llama.cpp, brisk's achieved GB/s
and its share of the measured memory bandwidth, and both peak RSS figures.

    python3 bench/cpu_bench.py --models bench/models/qwen3-0.6b-q4_k_m.gguf ... \
        --threads 1 2 --rounds 2 -p 512 -n 128 -r 3
"""
import argparse, json, os, statistics, subprocess, sys, datetime

def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")
    return [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the two engines")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    rows = []
    for model in args.models:
        for t in args.threads:
            res = {"brisk": {}, "llama.cpp": {}}
            for _ in range(args.rounds):
                for eng in ("brisk", "llama.cpp"):
                    exe = f"{args.build}/brisk" if eng == "brisk" else f"{args.build}/llamacpp-ref"
                    extra = ["--json"] if eng == "brisk" else []
                    for j in run([exe, "bench", "-m", model, "-p", str(args.p), "-n", str(args.n),
                                  "-r", str(args.r), "-t", str(t)] + extra):
                        res[eng].setdefault(j["test"], []).append(j)
            for test in res["brisk"]:
                b, l = res["brisk"][test], res["llama.cpp"].get(test, [])
                bt = statistics.mean(x["tps_mean"] for x in b)
                lt = statistics.mean(x["tps_mean"] for x in l) if l else float("nan")
                rows.append(dict(model=os.path.basename(model), t=t, test=test, brisk=bt,
                                 brisk_sd=statistics.mean(x["tps_sd"] for x in b), llama=lt,
                                 llama_sd=statistics.mean(x["tps_sd"] for x in l) if l else 0,
                                 ratio=bt / lt, gbs=statistics.mean(x["gbs"] for x in b),
                                 bw=statistics.mean(x["bw"] for x in b),
                                 rss_b=max(x["peak_rss_mb"] for x in b),
                                 rss_l=max(x["peak_rss_mb"] for x in l) if l else 0))
                r = rows[-1]
                print(f"{r['model']} t={t} {test}: brisk {bt:.2f} llama.cpp {lt:.2f} ratio {r['ratio']:.2f}", file=sys.stderr)
    print(f"Measured {datetime.date.today()} with `python3 bench/cpu_bench.py {' '.join(sys.argv[1:])}`\n")
    print("| model | threads | test | brisk tok/s | llama.cpp tok/s | brisk / llama.cpp | brisk GB/s | % of bw | brisk peak RSS MiB | llama.cpp peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['t']} | {r['test']} | {r['brisk']:.2f} ± {r['brisk_sd']:.2f} | {r['llama']:.2f} ± {r['llama_sd']:.2f} "
              f"| **{r['ratio']:.2f}x** | {r['gbs']:.1f} | {100*r['gbs']/r['bw']:.0f}% of {r['bw']:.1f} | {r['rss_b']:.0f} | {r['rss_l']:.0f} |")

if __name__ == "__main__":
    main()
