#!/usr/bin/env python3
"""One-token decode, engines alternated, timed two ways: wall tokens/s and CPU ms a token.

On a shared machine the wall figures follow the load; the CPU time a process spends per token
(user + sys, from the kernel's accounting of the child) does much less: it still counts memory
stalls and caches disturbed by other jobs, so compare engines only within one round. CPU ms a
token = (cpu(-n NHI) - cpu(-n NLO)) / tokens, which cancels loading, repacking and the warm-up
run; brisk's bench warms up with a whole run of -n tokens (so its difference covers twice the
tokens), llama-bench's with one token. With more than one thread, spinning workers count too:
read only the wall column there.

    python3 bench/cpu_time_ab.py --model bench/models/qwen3-0.6b-q8_0.gguf -t 1 --rounds 3 \\
        plain=build/brisk:BRISK_CPU_REPACK=0 repack=build/brisk llama=build/llamacpp-ref

An engine is NAME=EXE[:VAR=VALUE...]; an EXE whose name holds "llamacpp" is driven as
build/llamacpp-ref bench (LLAMACPP_LIBDIR, default the npm package's, is put on LD_LIBRARY_PATH).
"""
import argparse, json, os, resource, subprocess, sys

def llama_env():
    """The environment for build/llamacpp-ref: LLAMACPP_LIBDIR (default the npm package's) as LD_LIBRARY_PATH."""
    libdir = os.environ.get("LLAMACPP_LIBDIR", ".deps/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64")
    return dict(os.environ, LD_LIBRARY_PATH=libdir)


def parse_engines(specs):
    """NAME=EXE[:VAR=VALUE...] -> [(name, exe, {VAR: VALUE})]."""
    engs = []
    for e in specs:
        name, rest = e.split("=", 1)
        exe, *envs = rest.split(":")
        engs.append((name, exe, dict(x.split("=", 1) for x in envs)))
    return engs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("-t", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nlo", type=int, default=8)
    ap.add_argument("--nhi", type=int, default=40)
    ap.add_argument("engines", nargs="+")
    a = ap.parse_args()
    base = llama_env()
    engs = parse_engines(a.engines)

    def one(exe, n, env):
        brisk = "llamacpp" not in os.path.basename(exe)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run([exe, "bench", "-m", a.model, "-p", "0", "-n", str(n), "-r", "1", "-t", str(a.t)] +
                           (["--json"] if brisk else []), capture_output=True, text=True, env=dict(base, **env))
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            sys.exit(f"failed: {exe}\n{p.stderr[-2000:]}")
        j = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")][-1]
        return j["tps_mean"], (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), brisk

    for r in range(a.rounds):
        parts = []
        for name, exe, env in engs:
            _, clo, brisk = one(exe, a.nlo, env)
            tps, chi, _ = one(exe, a.nhi, env)
            toks = (a.nhi - a.nlo) * (2 if brisk else 1)
            parts.append(f"{name} {tps:.2f} tok/s {1000 * (chi - clo) / toks:.1f} cpu-ms/tok")
        print(f"{os.path.basename(a.model)} t={a.t} round={r + 1} load={os.getloadavg()[0]:.1f} | " + " | ".join(parts),
              flush=True)

if __name__ == "__main__":
    main()
