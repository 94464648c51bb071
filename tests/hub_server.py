#!/usr/bin/env python3
"""A stand-in for the Hugging Face hub's HTTP API, for tests/t_pull.sh.

usage: hub_server.py REPOS PORT_FILE LOG_FILE CTL_FILE

REPOS/ORG/NAME/... are the repos (their files as they are). It serves what brisk
pull reads, shaped like the real hub's answers:
  GET /api/models/ORG/NAME/refs                       {"branches": [{"name": "main", "targetCommit": ...}]}
  GET /api/models/ORG/NAME/tree/REV?recursive=true    the files, two a page (Link: <...>; rel="next")
  GET /ORG/NAME/resolve/REV/PATH                      a 302 to /cdn/SHA256 for .gguf (LFS) files, else the bytes
  GET /cdn/SHA256                                     the bytes, with Range
Each request is logged as one line: METHOD PATH range=... auth=... -> STATUS.
CTL_FILE, read at every request, holds words that change behaviour (counters restart
whenever its text changes):
  auth        every request needs "Authorization: Bearer secret-token", else 401
  cut         a /cdn/ answer to a request without Range stops halfway (connection closed)
  stall       a /cdn/ answer stops halfway and hangs (the client gets killed meanwhile)
  corrupt     /cdn/ bytes have one byte flipped (a wrong checksum)
  norange     /cdn/ ignores Range (a 200 with the whole file)
  429=N       the next N requests get 429 with Retry-After: 1
  429always   every request gets 429 with Retry-After: 1
"""
import hashlib, http.server, json, os, sys, threading, time, urllib.parse

REPOS, PORT_FILE, LOG_FILE, CTL_FILE = sys.argv[1:5]
PAGE = 2
lock = threading.Lock()
state = {"ctl": None, "429": 0}


def ctl_words():
    try:
        text = open(CTL_FILE).read()
    except OSError:
        text = ""
    with lock:
        if text != state["ctl"]:
            state["ctl"] = text
            state["429"] = 0
            for w in text.split():
                if w.startswith("429="):
                    state["429"] = int(w[4:])
    return text.split()


def repo_files(repo):
    """[(path, bytes)] of a repo, sorted; None if there is no such repo."""
    root = os.path.join(REPOS, repo)
    if repo.count("/") != 1 or not os.path.isdir(root):
        return None
    out = []
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out.append((os.path.relpath(p, root), open(p, "rb").read()))
    return sorted(out)


def commit_of(files):
    h = hashlib.sha1()
    for p, b in files:
        h.update(p.encode() + b"\0" + hashlib.sha256(b).digest())
    return h.hexdigest()


def blob_by_sha(sha):
    for org in os.listdir(REPOS):
        for name in os.listdir(os.path.join(REPOS, org)):
            for p, b in repo_files(org + "/" + name) or []:
                if hashlib.sha256(b).hexdigest() == sha:
                    return b
    return None


class Hub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def log(self, status):
        with lock, open(LOG_FILE, "a") as f:
            f.write("%s %s range=%s auth=%s -> %d\n" % (self.command, self.path, self.headers.get("Range", "-"),
                    "yes" if self.headers.get("Authorization") else "no", status))

    def send(self, status, body=b"", ctype="application/json", headers=()):
        self.log(status)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, msg, headers=()):
        self.send(status, json.dumps({"error": msg}).encode(), headers=list(headers) + [("X-Error-Message", msg)])

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        words = ctl_words()
        if "429always" in words:
            return self.error(429, "rate limited", [("Retry-After", "1")])
        with lock:
            limited = state["429"] > 0
            state["429"] -= limited
        if limited:
            return self.error(429, "rate limited", [("Retry-After", "1")])
        if "auth" in words and self.headers.get("Authorization") != "Bearer secret-token":
            return self.error(401, "Invalid credentials in Authorization header")
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        if parts[:2] == ["api", "models"] and len(parts) >= 5:
            return self.api(parts[2] + "/" + parts[3], parts[4:], urllib.parse.parse_qs(url.query))
        if parts[0] == "cdn" and len(parts) == 2:
            return self.cdn(parts[1], words)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]))
        self.error(404, "Not Found")

    def api(self, repo, rest, query):
        files = repo_files(repo)
        if files is None:
            return self.error(404, "Repository not found")
        commit = commit_of(files)
        if rest == ["refs"]:
            body = {"branches": [{"name": "dev", "ref": "refs/heads/dev", "targetCommit": "0" * 40},
                                 {"name": "main", "ref": "refs/heads/main", "targetCommit": commit}],
                    "converts": [], "tags": []}
            return self.send(200, json.dumps(body).encode())
        if len(rest) == 2 and rest[0] == "tree" and rest[1] in (commit, "main"):
            entries, dirs = [], set()
            for p, b in files:
                for i in range(1, p.count("/") + 1):
                    d = "/".join(p.split("/")[:i])
                    if d not in dirs:
                        dirs.add(d)
                        entries.append({"type": "directory", "oid": "1" * 40, "size": 0, "path": d})
                e = {"type": "file", "oid": hashlib.sha1(b"blob %d\0" % len(b) + b).hexdigest(), "size": len(b), "path": p}
                if p.endswith(".gguf"):
                    e["lfs"] = {"oid": hashlib.sha256(b).hexdigest(), "size": len(b), "pointerSize": 134}
                entries.append(e)
            start = int(query.get("cursor", ["0"])[0])
            headers = []
            if start + PAGE < len(entries):
                nxt = "http://%s/api/models/%s/tree/%s?recursive=true&cursor=%d" % (
                    self.headers["Host"], repo, rest[1], start + PAGE)
                headers.append(("Link", '<%s>; rel="next"' % nxt))
            return self.send(200, json.dumps(entries[start:start + PAGE]).encode(), headers=headers)
        self.error(404, "Revision not found")

    def resolve(self, repo, rev, path):
        files = repo_files(repo)
        if files is None:
            return self.error(404, "Repository not found")
        commit = commit_of(files)
        body = dict(files).get(path)
        if rev not in (commit, "main") or body is None:
            return self.error(404, "Entry not found")
        sha = hashlib.sha256(body).hexdigest()
        meta = [("X-Repo-Commit", commit), ("ETag", '"%s"' % sha)]
        if path.endswith(".gguf"):
            return self.send(302, b"", "text/plain", meta + [("Location", "/cdn/" + sha), ("X-Linked-Size", str(len(body)))])
        self.send(200, body, "application/octet-stream", meta)

    def cdn(self, sha, words):
        body = blob_by_sha(sha)
        if body is None:
            return self.error(404, "Not Found")
        if "corrupt" in words:
            body = body[:100] + bytes([body[100] ^ 1]) + body[101:]
        rng = self.headers.get("Range")
        start = 0
        if rng and "norange" not in words:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(body):
                return self.send(416, b"", "text/plain", [("Content-Range", "bytes */%d" % len(body))])
        status = 206 if start else 200
        self.log(status)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body) - start))
        if start:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(body) - 1, len(body)))
        self.end_headers()
        if start == 0 and ("cut" in words or "stall" in words):
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            if "stall" in words:
                time.sleep(60)
            self.close_connection = True
            return
        self.wfile.write(body[start:])


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
srv.daemon_threads = True
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
srv.serve_forever()
