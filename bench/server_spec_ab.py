#!/usr/bin/env python3
"""Speculative decoding in `brisk serve`: servers with and without it, alternated, on greedy requests.

Starts one `brisk serve` per configuration (NAME="FLAGS"; the first is the baseline, usually
plain="") on the same model, then for each round and each stream count C sends C concurrent
non-streaming /v1/completions requests (temperature 0, --max-tokens each, ignore_eos) to each
server in turn, with one of two prompts: "repeat" (a passage said twice: n-gram drafters find
matches) or "fresh" (a short opening: little to look up). Per server and workload it reports the
median over rounds of wall tokens/s and of the server process's CPU ms per generated token
(user + sys from /proc/PID/stat: on a shared machine it follows the load much less than wall
time; with -t 1 every thread is a working one), and the drafts verified and accepted (the
responses' timings.draft_n and draft_n_accepted) summed over rounds. Alternating the servers
within each round keeps the comparison fair on a busy machine. Standard library only:

    python3 bench/server_spec_ab.py --brisk build/brisk -m models/brisk-kjv-6m.gguf --streams 1 4 \\
        plain="" ngram="--spec-type ngram-simple" draft="-md models/brisk-kjv-draft.gguf"
"""
import argparse, json, os, shlex, socket, statistics, subprocess, sys, threading, time, urllib.request

REPEAT = ("And God said, Let there be light: and there was light. And God saw the light, that it was good: and "
          "God divided the light from the darkness. And God said, Let there be light: and there was light. And "
          "God saw the light, that it was good: and God divided")
FRESH = "In the beginning"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cpu_s(pid):
    """utime + stime of a process, seconds."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def start(a, flags):
    port = free_port()
    cmd = [a.brisk, "serve", "-m", a.model, "--port", str(port), "-t", str(a.threads), "-c", "1024",
           "--parallel", str(max(a.streams)), "--no-access-log"] + shlex.split(flags)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return p, port
        except Exception:  # noqa: BLE001 - not up yet
            if p.poll() is not None:
                sys.exit(f"server {cmd} exited: {p.stderr.read().decode()}")
            time.sleep(0.1)
    sys.exit(f"server {cmd} did not start")


def run(port, prompt, streams, max_tokens):
    """C concurrent requests; returns (generated tokens, wall s, drafted, accepted)."""
    out = []

    def one():
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        o = json.load(urllib.request.urlopen(req, timeout=600))
        t = o.get("timings", {})
        out.append((o["usage"]["completion_tokens"], t.get("draft_n", 0), t.get("draft_n_accepted", 0)))

    ts = [threading.Thread(target=one) for _ in range(streams)]
    t0 = time.monotonic()
    for t in ts: t.start()
    for t in ts: t.join()
    wall = time.monotonic() - t0
    return sum(x[0] for x in out), wall, sum(x[1] for x in out), sum(x[2] for x in out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brisk", default="build/brisk")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("configs", nargs="+", help='NAME="brisk serve flags"')
    a = ap.parse_args()
    cfgs = [c.split("=", 1) for c in a.configs]
    servers = {name: start(a, flags) for name, flags in cfgs}
    res = {}  # (name, workload, streams) -> lists
    try:
        for name, (_, port) in servers.items():  # warm-up: repack, caches
            run(port, FRESH, 1, 8)
        for _ in range(a.rounds):
            for wl, prompt in (("repeat", REPEAT), ("fresh", FRESH)):
                for c in a.streams:
                    for name, (p, port) in servers.items():
                        c0 = cpu_s(p.pid)
                        n, wall, dr, acc = run(port, prompt, c, a.max_tokens)
                        r = res.setdefault((name, wl, c), {"tps": [], "cpu": [], "dr": 0, "acc": 0})
                        r["tps"].append(n / wall)
                        r["cpu"].append(1e3 * (cpu_s(p.pid) - c0) / n)
                        r["dr"] += dr
                        r["acc"] += acc
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait()
    base = cfgs[0][0]
    print(f"| server | prompt | streams | tok/s (wall) | CPU ms/token | vs {base} (CPU) | drafts verified | accepted |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (name, wl, c), r in res.items():
        cpu = statistics.median(r["cpu"])
        b = statistics.median(res[(base, wl, c)]["cpu"])
        print(f"| {name} | {wl} | {c} | {statistics.median(r['tps']):.1f} | {cpu:.3f} | {b / cpu:.2f}x | {r['dr']} | "
              f"{r['acc']} ({100 * r['acc'] / r['dr'] if r['dr'] else 0:.0f}%) |")


if __name__ == "__main__":
    main()
