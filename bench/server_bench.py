#!/usr/bin/env python3
"""Server benchmark: `brisk serve` under 1, 8, 32, 64 concurrent streaming clients.

Starts `brisk serve` on a model (or uses a running OpenAI-compatible server with
--url, llama.cpp's llama-server for instance), then for each endpoint and stream
count C runs C clients that each send streaming requests back to back (a prompt
of --prompt tokens in an order of the client's and request's own, so no two
prompts share a cached prefix; --max-tokens tokens with ignore_eos) until
--duration seconds have passed (every client finishes at least one request;
requests in flight at the deadline complete and count). --endpoint picks the
API: completions (/v1/completions, the prompt as token ids), chat
(/v1/chat/completions), responses (/v1/responses), messages (/v1/messages);
the last three send the prompt as text through the chat template, and their
overhead against completions is what the agent endpoints cost (issue 33).
The table: completed requests, requests/s and generated tokens/s over the
wall time from the first request to the last completion, time to first token
p50/p90/p99 (request sent -> first text chunk), and inter-token latency p50
(over requests: (last chunk - first chunk) / (tokens - 1)).

With --llamacpp-ref it also runs the engine-level comparison the server rests
on, with the same model and threads: llama.cpp's batched-bench method
(`llamacpp-ref batched`: B sequences of P prompt tokens, then N steps of B
tokens) against `brisk bench -p 0 -n N -d P -np B` (B sequences after P cached
tokens each), both as aggregate generated tokens/s.

Python 3 standard library only (runs on a GPU host without node or pip):

    python3 bench/server_bench.py --brisk build/brisk -m MODEL [--ngl N] --streams 1 8 32 64
    python3 bench/server_bench.py --url http://127.0.0.1:8080 --streams 1 8    # any running server
"""
import argparse, datetime, http.client, json, os, random, signal, socket, statistics, subprocess, sys
import threading, time, urllib.parse


def pct(xs, p):
    """The p-th percentile (nearest rank) of xs, NaN when empty."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p / 100 * len(xs) + 0.5)) - 1))]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """brisk serve as a child process, stopped with SIGTERM."""

    def __init__(self, args, n_parallel):
        self.port = free_port()
        ctx = args.prompt + args.max_tokens + 64
        cmd = [args.brisk, "serve", "-m", args.model, "--port", str(self.port), "--parallel", str(n_parallel),
               "-c", str(ctx), "--queue", str(max(64, 2 * n_parallel))]
        if args.threads:
            cmd += ["-t", str(args.threads)]
        if args.ngl is not None:
            cmd += ["-ngl", str(args.ngl)]
        cmd += args.serve_args
        self.log = open(args.log, "w") if args.log else subprocess.DEVNULL
        print("starting: " + " ".join(cmd), file=sys.stderr)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 600  # a large model may take a while to load
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"brisk serve exited with {self.proc.returncode} (see --log)")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        sys.exit("brisk serve did not come up")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def post(url, path, body, timeout=600):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json", "Authorization": "Bearer none"})
    return c, c.getresponse()


def base_tokens(url, n):
    """n token ids of plain English text (through /tokenize), repeated as needed."""
    text = ("The old lighthouse keeper climbed the stairs every evening to light the lamp, and from the top "
            "he watched the ships come home across the grey water while the gulls circled the harbour. ")
    c, r = post(url, "/tokenize", {"content": text})
    ids = json.loads(r.read())["tokens"]
    c.close()
    ids = [t["id"] if isinstance(t, dict) else t for t in ids]
    return (ids * (n // len(ids) + 1))[:n]


ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions", "responses": "/v1/responses",
             "messages": "/v1/messages"}


MODEL = "default"  # the served model's name (GET /v1/models), which the chat-style APIs must send


def served_model(url):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=60)
    c.request("GET", "/v1/models", headers={"Authorization": "Bearer none"})
    data = json.loads(c.getresponse().read()).get("data") or [{}]
    c.close()
    return data[0].get("id", MODEL)


def request_body(endpoint, prompt, max_tokens):
    """The streaming request of an endpoint: prompt is token ids (completions) or text."""
    common = {"ignore_eos": True, "temperature": 0, "stream": True}
    if endpoint == "completions":
        return {"prompt": prompt, "max_tokens": max_tokens, "stream_options": {"include_usage": True}, **common}
    msgs = [{"role": "user", "content": prompt}]
    if endpoint == "chat":
        return {"model": MODEL, "messages": msgs, "max_tokens": max_tokens, "stream_options": {"include_usage": True},
                **common}
    if endpoint == "responses":
        return {"model": MODEL, "input": prompt, "max_output_tokens": max_tokens, **common}
    return {"model": MODEL, "messages": msgs, "max_tokens": max_tokens, **common}


def event_text(endpoint, ev):
    """(generated text in this streamed event, output tokens it reports or 0)."""
    if endpoint in ("completions", "chat"):
        usage = (ev.get("usage") or {}).get("completion_tokens", 0)
        text = ""
        for ch in ev.get("choices") or []:
            d = ch.get("delta") or {}
            text += ch.get("text") or d.get("content") or d.get("reasoning_content") or ""
        return text, usage
    t = ev.get("type", "")
    if endpoint == "responses":
        if t in ("response.output_text.delta", "response.reasoning_text.delta"):
            return ev.get("delta") or "", 0
        if t in ("response.completed", "response.incomplete"):
            return "", ((ev.get("response") or {}).get("usage") or {}).get("output_tokens", 0)
        return "", 0
    if t == "content_block_delta":
        d = ev.get("delta") or {}
        return d.get("text") or d.get("thinking") or "", 0
    if t == "message_delta":
        return "", (ev.get("usage") or {}).get("output_tokens", 0)
    return "", 0


def base_words(url, n):
    """Words of the base text, as many as make about n tokens (through /tokenize), repeated as needed."""
    text = ("The old lighthouse keeper climbed the stairs every evening to light the lamp, and from the top "
            "he watched the ships come home across the grey water while the gulls circled the harbour.")
    c, r = post(url, "/tokenize", {"content": text})
    per_word = len(json.loads(r.read())["tokens"]) / len(text.split())
    c.close()
    words = text.split()
    k = max(1, int(n / per_word))
    return (words * (k // len(words) + 1))[:k]


def one_request(url, prompt, max_tokens, endpoint="completions"):
    """One streaming request. Returns (ttft_s, itl_s or None, tokens) or raises."""
    body = request_body(endpoint, prompt, max_tokens)
    t0 = time.perf_counter()
    c, r = post(url, ENDPOINTS[endpoint], body)
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    first = last = None
    tokens = chunks = 0
    for raw in r:
        line = raw.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        text, n = event_text(endpoint, json.loads(data))
        tokens = n or tokens
        if text:
            now = time.perf_counter()
            first = first or now
            last = now
            chunks += 1
    c.close()
    if first is None:
        raise RuntimeError("no text came back")
    tokens = tokens or chunks
    itl = (last - first) / (tokens - 1) if tokens > 1 else None
    return first - t0, itl, tokens


def run_level(url, streams, args, base, endpoint="completions", words=None):
    """streams clients for args.duration seconds on one endpoint; returns a result row."""
    ttft, itl, toks, errors = [], [], [], []
    lock = threading.Lock()
    t_start = time.perf_counter()
    deadline = t_start + args.duration

    def client(k):
        i = 0
        while True:
            # the base text's tokens in an order of its own: no two prompts share a cached prefix
            rnd = random.Random(k * 1000003 + i)
            prompt = base[:] if endpoint == "completions" else words[:]
            rnd.shuffle(prompt)
            if endpoint != "completions":
                prompt = " ".join(prompt)
            try:
                a, b, n = one_request(url, prompt, args.max_tokens, endpoint)
                with lock:
                    ttft.append(a)
                    toks.append(n)
                    if b is not None:
                        itl.append(b)
            except Exception as e:  # counted, not fatal: the table shows it
                with lock:
                    errors.append(str(e))
            i += 1
            if time.perf_counter() >= deadline:
                return

    th = [threading.Thread(target=client, args=(k,)) for k in range(streams)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t_start
    if errors:
        print(f"  {len(errors)} errors, first: {errors[0]}", file=sys.stderr)
    return dict(endpoint=endpoint, streams=streams, requests=len(toks), errors=len(errors), wall=wall, rps=len(toks) / wall,
                tps=sum(toks) / wall, ttft50=pct(ttft, 50) * 1e3, ttft90=pct(ttft, 90) * 1e3,
                ttft99=pct(ttft, 99) * 1e3, itl50=pct(itl, 50) * 1e3)


def run_json(cmd):
    print("running: " + " ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")
    return [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]


def batched_table(args):
    """llama.cpp's batched-bench method against brisk bench -np, same model, threads, P and N."""
    t = args.threads or os.cpu_count()
    rows = []
    for b in args.streams:
        bj = run_json([args.brisk, "bench", "-m", args.model, "-p", "0", "-n", str(args.max_tokens), "-d",
                       str(args.prompt), "-np", str(b), "-r", str(args.reps), "-t", str(t), "--json"]
                      + (["-ngl", str(args.ngl)] if args.ngl is not None else []))
        lj = run_json([args.llamacpp_ref, "batched", "-m", args.model, "-p", str(args.prompt), "-n",
                       str(args.max_tokens), "-npl", str(b), "-r", str(args.reps), "-t", str(t)])
        bt = [j for j in bj if j["test"].startswith("tg")][0]["tps_mean"]
        rows.append(dict(b=b, brisk=bt, llama=lj[0]["speed_tg"], llama_pp=lj[0]["speed_pp"]))
        print(f"  B={b}: brisk {bt:.1f} llama.cpp {lj[0]['speed_tg']:.1f} tok/s", file=sys.stderr)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brisk", default="build/brisk", help="the brisk binary")
    ap.add_argument("-m", "--model", help="GGUF model for brisk serve")
    ap.add_argument("--url", help="bench this running server instead of starting brisk serve")
    ap.add_argument("--ngl", type=int, help="brisk -ngl (layers on the GPU)")
    ap.add_argument("-t", "--threads", type=int, default=0, help="CPU threads (0: brisk's default)")
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--endpoint", nargs="+", default=["completions"], choices=sorted(ENDPOINTS),
                    help="the APIs to bench, a table row per endpoint and stream count")
    ap.add_argument("--duration", type=float, default=30, help="seconds per stream count")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens per request")
    ap.add_argument("--max-tokens", type=int, default=128, help="generated tokens per request")
    ap.add_argument("--llamacpp-ref", help="also run llamacpp-ref batched vs brisk bench -np")
    ap.add_argument("-r", "--reps", type=int, default=1, help="repetitions of the batched runs")
    ap.add_argument("--log", help="brisk serve's output goes here")
    ap.add_argument("--serve-args", nargs=argparse.REMAINDER, default=[], help="more brisk serve flags (last)")
    args = ap.parse_args()
    if not args.url and not args.model:
        ap.error("-m MODEL (or --url)")
    server = None if args.url else Server(args, max(args.streams))
    url = args.url or server.url
    rows = []
    try:
        global MODEL
        MODEL = served_model(url)
        base = base_tokens(url, args.prompt)
        words = base_words(url, args.prompt)
        for ep in args.endpoint:
            one_request(url, base if ep == "completions" else " ".join(words), 4, ep)  # warm-up
            for s in args.streams:
                print(f"{ep}: {s} streams, {args.duration:g} s ...", file=sys.stderr)
                rows.append(run_level(url, s, args, base, ep, words))
    finally:
        if server:
            server.stop()
    what = args.url or os.path.basename(args.model)
    print(f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC with "
          f"`python3 bench/server_bench.py {' '.join(sys.argv[1:])}`\n")
    print(f"{what}: streaming requests, {args.prompt} prompt tokens (completions; the others about as many words' "
          f"tokens through the chat template), {args.max_tokens} generated (ignore_eos), {args.duration:g} s per row\n")
    print("| endpoint | streams | requests | errors | req/s | gen tok/s | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms "
          "| ITL p50 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['endpoint']} | {r['streams']} | {r['requests']} | {r['errors']} | {r['rps']:.2f} | {r['tps']:.1f} "
              f"| {r['ttft50']:.0f} "
              f"| {r['ttft90']:.0f} | {r['ttft99']:.0f} | {r['itl50']:.1f} |")
    if args.llamacpp_ref and args.model:
        br = batched_table(args)
        print(f"\nBatched decode, {args.prompt} prompt tokens per sequence then {args.max_tokens} steps, "
              f"{args.threads or os.cpu_count()} threads (aggregate generated tokens/s):\n")
        print("| B | brisk bench -np B | llama.cpp batched | brisk / llama.cpp | llama.cpp prompt tok/s (B x P) |")
        print("|---|---|---|---|---|")
        for r in br:
            print(f"| {r['b']} | {r['brisk']:.1f} | {r['llama']:.1f} | **{r['brisk'] / r['llama']:.2f}x** | {r['llama_pp']:.1f} |")


if __name__ == "__main__":
    main()
