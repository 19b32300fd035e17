#!/usr/bin/env python3
"""tests/server/soak.py CELER_BIN: the server soak test (`make soak`; not part of
`make test`). Python 3 standard library only.

Starts `celer serve` on models/default (port 0, 127.0.0.1), records the greedy answer
of every prompt in a fixed set of distinct prompts (completions, chat and the native
/completion), then runs SOAK_CLIENTS threads (default 16) for SOAK_SECONDS (default
600) that send a seeded mix of
  valid        greedy requests (plain or streamed) whose answer must equal the recorded
               one byte for byte: a different answer is counted, and if it is another
               prompt's answer it is counted as cross-talk
  malformed    broken JSON, wrong types, out-of-range values, invalid UTF-8, unknown
               paths and methods, bad token ids: must get 4xx with an error body
  oversized    a body over --max-body (413), a prompt over the context (400), a lying
               Content-Length (413 before the body is read)
  disconnect   clients that go away: mid-stream, mid-body, before sending anything,
               right after sending a request (queued or running)
  slow         slowloris headers (a byte at a time: 408 at --header-timeout), a body
               trickled below --min-body-rate (408), an endless chunked upload (413
               after at most a few MiB), a half-closed client (shutdown(SHUT_WR) after
               its greedy request: the recorded answer must still come)
  misc         /tokenize, /detokenize, /v1/models, /health, /metrics
Afterwards (the load gone): the server answers /health, every recorded greedy answer
is produced again, the RSS is within SOAK_RSS_SLACK (default 1.25x + 16 MiB) of its
level after a warm-up under the same load, the process is alive (crashes: 0), and
SIGTERM ends it with exit status 0. Prints the figures; exits 1 on any failure.
"""
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

CELER = sys.argv[1] if len(sys.argv) > 1 else "build/celer"
SECONDS = float(os.environ.get("SOAK_SECONDS", "600"))
CLIENTS = int(os.environ.get("SOAK_CLIENTS", "16"))
WARMUP = float(os.environ.get("SOAK_WARMUP", str(min(60.0, SECONDS / 10))))
SEED = int(os.environ.get("SOAK_SEED", "1"))
MAX_BODY = 65536
CTX = 512
HEADER_TIMEOUT = 3    # --header-timeout
MIN_BODY_RATE = 2000  # --min-body-rate
GEN = 12  # greedy tokens per valid request

SUBJECTS = ["And the LORD", "In the beginning", "Then Moses", "And David", "Blessed is the man", "And Jesus",
            "Now the serpent", "And it came to pass", "The heavens declare", "And Abraham", "For God so loved",
            "And the children of Israel"]
TAILS = ["said unto", "went up to", "spake these words", "looked upon the"]
PROMPTS = [f"{s} {t}" for s in SUBJECTS for t in TAILS]  # 48 distinct prompts


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


class Server:
    def __init__(self):
        self.log = open(os.environ.get("SOAK_LOG", "/tmp/celer-soak-server.log"), "w+")
        self.p = subprocess.Popen([CELER, "serve", "-m", "models/default", "--port", "0", "-np", "4", "-c", str(CTX),
                                   "--max-body", str(MAX_BODY), "--metrics", "--queue-size", "256",
                                   "--header-timeout", str(HEADER_TIMEOUT), "--min-body-rate", str(MIN_BODY_RATE)],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        for _ in range(1200):
            self.log.seek(0)
            text = self.log.read()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
            if m and " ready " in text:
                self.port = int(m.group(1))
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.1)
        raise SystemExit(f"soak: the server did not start:\n{text}")


def request(port, method, path, body=None, timeout=120, headers=None):
    """(status, body bytes); status 0 on a connection error."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        return r.status, r.read()
    except (OSError, http.client.HTTPException):
        return 0, b""
    finally:
        c.close()


def sse_text(raw, chat):
    """Concatenated text of an SSE body; None when it does not end with [DONE]."""
    out = []
    done = False
    for line in raw.decode("utf-8", "replace").split("\n"):
        if not line.startswith("data: "):
            continue
        d = line[6:]
        if d == "[DONE]":
            done = True
            continue
        o = json.loads(d)
        if "error" in o:
            return None
        for ch in o.get("choices", []):
            out.append((ch.get("delta", {}).get("content") or "") if chat else (ch.get("text") or ""))
    return "".join(out) if done else None


# ---- the three greedy request shapes ----
def valid_body(kind, i, stream):
    p = PROMPTS[i]
    if kind == "chat":
        return "/v1/chat/completions", {"messages": [{"role": "user", "content": p}], "temperature": 0,
                                        "max_tokens": GEN, "stream": stream}
    if kind == "cmpl":
        return "/v1/completions", {"prompt": p, "temperature": 0, "max_tokens": GEN, "stream": stream}
    return "/completion", {"prompt": p, "temperature": 0, "n_predict": GEN, "stream": stream}


def answer_of(kind, status, raw, stream):
    if status != 200:
        return None
    try:
        if stream:
            if kind == "native":
                out = []
                for line in raw.decode().split("\n"):
                    if line.startswith("data: "):
                        out.append(json.loads(line[6:]).get("content", ""))
                return "".join(out)
            return sse_text(raw, kind == "chat")
        o = json.loads(raw)
        if kind == "chat":
            return o["choices"][0]["message"]["content"]
        if kind == "cmpl":
            return o["choices"][0]["text"]
        return o["content"]
    except (ValueError, KeyError, IndexError):
        return None


class Stats:
    def __init__(self):
        self.mu = threading.Lock()
        self.sent = {}
        self.status = {}
        self.bad = []          # unexpected outcomes (first 20 kept)
        self.n_bad = 0
        self.wrong = 0         # valid answers that differ from the recorded one
        self.crosstalk = 0     # ... and equal another prompt's answer

    def count(self, kind, status):
        with self.mu:
            self.sent[kind] = self.sent.get(kind, 0) + 1
            k = (kind, status)
            self.status[k] = self.status.get(k, 0) + 1

    def fail(self, what):
        with self.mu:
            self.n_bad += 1
            if len(self.bad) < 20:
                self.bad.append(what)


MALFORMED = [
    ("/v1/chat/completions", b'{"messages":[{"role":"user","content":"x"}'),
    ("/v1/chat/completions", b'{"messages":"hello"}'),
    ("/v1/chat/completions", b'{"messages":[]}'),
    ("/v1/chat/completions", b'{"messages":[{"role":1}]}'),
    ("/v1/chat/completions", b'{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}'),
    ("/v1/chat/completions", b'{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}'),
    ("/v1/chat/completions", b'{"messages":[{"role":"user","content":"x"}],"top_logprobs":5}'),
    ("/v1/chat/completions", b'{"messages":[{"role":"user","content":"\xff\xfe"}]}'),
    ("/v1/chat/completions", b'{"model":"gpt-4","messages":[{"role":"user","content":"x"}]}'),
    ("/v1/completions", b'[1,2,3]'),
    ("/v1/completions", b'{"prompt":[99999999]}'),
    ("/v1/completions", b'{"prompt":"x","n":1000}'),
    ("/v1/completions", b'{"prompt":"x","stop":7}'),
    ("/v1/completions", b'{"prompt":"x","echo":true}'),
    ("/v1/completions", b'{}'),
    ("/v1/completions", b''),
    ("/completion", b'{"prompt":{"a":1}}'),
    ("/tokenize", b'{"content":5}'),
    ("/detokenize", b'{"tokens":["a"]}'),
    ("/v1/nothing", b'{}'),
]


def do_valid(port, rng, st, expected):
    kind = rng.choice(["chat", "cmpl", "native"])
    i = rng.randrange(len(PROMPTS))
    stream = rng.random() < 0.5
    path, body = valid_body(kind, i, stream)
    status, raw = request(port, "POST", path, body)
    st.count("valid", status)
    got = answer_of(kind, status, raw, stream)
    want = expected[kind][i]
    if got != want:
        st.fail(f"valid {kind} #{i} stream={stream}: status {status}, got {got!r}, want {want!r}")
        with st.mu:
            st.wrong += 1
            if got is not None and any(got == a for j, a in enumerate(expected[kind]) if j != i):
                st.crosstalk += 1


def do_malformed(port, rng, st):
    path, body = rng.choice(MALFORMED)
    method = "POST"
    if rng.random() < 0.1:
        method, path, body = "GET", "/v1/chat/completions", None
    status, raw = request(port, method, path, body)
    st.count("malformed", status)
    ok = 400 <= status < 500 and b'"error"' in raw
    if not ok:
        st.fail(f"malformed {method} {path} {body[:60] if body else b''!r}: status {status} {raw[:200]!r}")


def do_oversized(port, rng, st):
    r = rng.random()
    if r < 0.4:  # body over --max-body
        status, raw = request(port, "POST", "/v1/completions", {"prompt": "x", "pad": "y" * (MAX_BODY + 100)})
        want = 413
    elif r < 0.7:  # a prompt over the context
        status, raw = request(port, "POST", "/v1/completions", {"prompt": "and the LORD said " * 400, "max_tokens": 4})
        want = 400
    else:  # a Content-Length far over the limit, with no body sent: refused before reading
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 999999999\r\n\r\n{\"prompt\":")
            data = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
                if b"\r\n\r\n" in data and b"}}" in data:
                    break
            s.close()
            m = re.match(rb"HTTP/1\.[01] (\d+)", data)
            status, raw = (int(m.group(1)), data) if m else (0, data)
        except OSError:
            status, raw = 0, b""
        want = 413
    st.count("oversized", status)
    if status != want or b'"error"' not in raw:
        st.fail(f"oversized: want {want}, got {status} {raw[:200]!r}")


def do_disconnect(port, rng, st):
    how = rng.randrange(4)
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        if how == 0:  # connect, say nothing, leave
            pass
        elif how == 1:  # half a body, leave
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":\"And")
        else:  # a whole generation request; leave at once (2) or after the first bytes of a stream (3)
            body = json.dumps({"prompt": rng.choice(PROMPTS), "max_tokens": 200, "temperature": 0.7,
                               "ignore_eos": True, "stream": how == 3}).encode()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\n\r\n" + body)
            if how == 3:
                s.recv(200)
        s.close()
        st.count("disconnect", how)
    except OSError as e:
        st.count("disconnect", "connect-error")
        st.fail(f"disconnect {how}: {e}")


def read_answer(s, limit):
    """(status, body) of the final answer on socket s (interim 1xx skipped), reading
    until the server closes or the answer is complete; (0, b'') on a reset."""
    data = b""
    end = time.time() + limit
    try:
        while time.time() < end:
            s.settimeout(max(0.05, end - time.time()))
            b = s.recv(65536)
            if not b:
                break
            data += b
            head, sep, body = data.partition(b"\r\n\r\n")
            while sep and re.match(rb"HTTP/1\.1 1\d\d ", head):
                data = body
                head, sep, body = data.partition(b"\r\n\r\n")
            m = re.search(rb"content-length: (\d+)", head, re.I)
            if sep and m and len(body) >= int(m.group(1)):
                break
    except OSError:
        pass
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/1\.[01] (\d+)", head)
    return (int(m.group(1)) if m else 0), body


def do_slow(port, rng, st, expected):
    how = rng.randrange(4)
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        if how == 0:  # slowloris: a header byte every 0.25 s
            head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 100
            t0 = time.time()
            closed = False
            for ch in head:
                try:
                    s.send(bytes([ch]))
                    s.settimeout(0.25)
                    b = s.recv(4096)
                    closed = True
                    break
                except socket.timeout:
                    continue
                except OSError:
                    closed, b = True, b""
                    break
            took = time.time() - t0
            status = int(b[9:12]) if closed and b.startswith(b"HTTP/1.1 ") else 0
            ok = closed and took < HEADER_TIMEOUT + 5 and (status == 408 or not b)
            what = f"slowloris closed after {took:.1f} s with {b[:60]!r}"
        elif how == 1:  # a body trickled below the rate
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n{\"prompt\":\"")
            t0 = time.time()
            status, b = 0, b""
            while time.time() - t0 < HEADER_TIMEOUT + 10:
                try:
                    s.send(b"a" * 10)
                    s.settimeout(0.2)
                    b = s.recv(4096)
                    status = int(b[9:12]) if b.startswith(b"HTTP/1.1 ") else 0
                    break
                except socket.timeout:
                    continue
                except OSError:
                    break
            ok = status == 408 and b"--min-body-rate" in b
            what = f"trickled body: {status} {b[:200]!r}"
        elif how == 2:  # an endless chunked upload
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"4000\r\n" + b"x" * 0x4000 + b"\r\n"
            sent, status, b = 0, 0, b""
            s.settimeout(0.01)
            t0 = time.time()
            while sent < (64 << 20) and time.time() - t0 < 30:
                try:
                    s.sendall(chunk)
                    sent += len(chunk)
                except socket.timeout:
                    pass
                except OSError:
                    break
                try:
                    b = s.recv(4096)
                    break
                except socket.timeout:
                    continue
                except OSError:
                    break
            if not b:
                s.settimeout(5)
                try:
                    b = s.recv(4096)
                except OSError:
                    b = b""
            status = int(b[9:12]) if b.startswith(b"HTTP/1.1 ") else 0
            # the answer can be lost to a reset when the upload is still in flight; the
            # upload must be cut off either way
            ok = sent < (16 << 20) and (status == 413 or not b)
            what = f"endless chunked: {status} after {sent} bytes {b[:100]!r}"
        else:  # half-closed after a greedy request: the answer must still come
            kind = rng.choice(["cmpl", "native"])
            i = rng.randrange(len(PROMPTS))
            path, body = valid_body(kind, i, False)
            data = json.dumps(body).encode()
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(data)}"
                      "\r\n\r\n".encode() + data)
            s.shutdown(socket.SHUT_WR)
            status, raw = read_answer(s, 120)
            got = answer_of(kind, status, raw, False)
            ok = got == expected[kind][i]
            what = f"half-closed {kind} #{i}: {status} got {got!r}, want {expected[kind][i]!r}"
        s.close()
        st.count("slow", ["slowloris", "trickled body", "endless chunked", "half-closed"][how])
        if not ok:
            st.fail(what)
    except OSError as e:
        st.count("slow", "connect-error")
        st.fail(f"slow {how}: {e}")


def do_misc(port, rng, st):
    r = rng.randrange(5)
    if r == 0:
        status, raw = request(port, "POST", "/tokenize", {"content": rng.choice(PROMPTS), "with_pieces": True})
    elif r == 1:
        status, raw = request(port, "POST", "/detokenize", {"tokens": [rng.randrange(512) for _ in range(8)]})
    elif r == 2:
        status, raw = request(port, "GET", "/v1/models")
    elif r == 3:
        status, raw = request(port, "GET", "/health")
    else:
        status, raw = request(port, "GET", "/metrics")
    st.count("misc", status)
    if status != 200:
        st.fail(f"misc {r}: status {status} {raw[:200]!r}")


def client(port, seed, deadline, st, expected):
    rng = random.Random(seed)
    while time.time() < deadline:
        r = rng.random()
        if r < 0.40:
            do_valid(port, rng, st, expected)
        elif r < 0.58:
            do_malformed(port, rng, st)
        elif r < 0.68:
            do_oversized(port, rng, st)
        elif r < 0.82:
            do_disconnect(port, rng, st)
        elif r < 0.92:
            do_slow(port, rng, st, expected)
        else:
            do_misc(port, rng, st)


def record(port):
    """Greedy answers of every prompt and shape, sent one at a time."""
    exp = {}
    for kind in ("chat", "cmpl", "native"):
        exp[kind] = []
        for i in range(len(PROMPTS)):
            path, body = valid_body(kind, i, False)
            status, raw = request(port, "POST", path, body)
            a = answer_of(kind, status, raw, False)
            if a is None:
                raise SystemExit(f"soak: recording {kind} #{i}: status {status} {raw[:300]!r}")
            exp[kind].append(a)
    return exp


def run_load(port, seconds, st, expected, seed):
    deadline = time.time() + seconds
    ts = [threading.Thread(target=client, args=(port, seed * 1000 + k, deadline, st, expected)) for k in range(CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def main():
    t_start = time.time()
    srv = Server()
    pid, port = srv.p.pid, srv.port
    rss_loaded = rss_kib(pid)
    expected = record(port)
    distinct = len(set(expected["cmpl"]))
    rss_recorded = rss_kib(pid)
    warm = Stats()
    run_load(port, WARMUP, warm, expected, SEED + 7919)
    time.sleep(2)
    rss_warm = rss_kib(pid)
    st = Stats()
    t0 = time.time()
    run_load(port, SECONDS, st, expected, SEED)
    soak_s = time.time() - t0
    time.sleep(3)  # cancelled jobs leave on the scheduler's next step
    rss_after = rss_kib(pid)
    alive = srv.p.poll() is None
    hs, hb = request(port, "GET", "/health")
    again = record(port) if alive else None
    same = again == expected
    rss_final = rss_kib(pid)
    status_m, metrics = request(port, "GET", "/metrics")
    srv.p.send_signal(signal.SIGTERM)
    try:
        rc = srv.p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        srv.p.kill()
        rc = "hung"
    crashes = 0 if alive and rc == 0 else 1

    slack = os.environ.get("SOAK_RSS_SLACK", "1.25,16384").split(",")
    rss_limit = int(rss_warm * float(slack[0]) + int(slack[1]))
    rss_ok = 0 < rss_after <= rss_limit and 0 < rss_final <= rss_limit

    print(f"soak: {CELER} serve -m models/default -np 4 -c {CTX} --max-body {MAX_BODY} --header-timeout {HEADER_TIMEOUT} "
          f"--min-body-rate {MIN_BODY_RATE}; "
          f"{CLIENTS} clients, {soak_s:.0f} s (after a {WARMUP:.0f} s warm-up), seed {SEED}")
    print(f"prompts: {len(PROMPTS)} distinct, greedy answers recorded for chat, completions and /completion "
          f"({distinct} distinct completions)")
    print("\n| kind | sent | responses by status |\n|---|---:|---|")
    for kind in ("valid", "malformed", "oversized", "disconnect", "slow", "misc"):
        by = sorted((str(k[1]), v) for k, v in st.status.items() if k[0] == kind)
        label = {"disconnect": "how (0 idle, 1 half body, 2 after request, 3 mid-stream)"}.get(kind, "")
        print(f"| {kind} | {st.sent.get(kind, 0)} | " + ", ".join(f"{s}: {v}" for s, v in by) +
              (f" ({label})" if label else "") + " |")
    total = sum(st.sent.values())
    print(f"\nrequests: {total} ({total / soak_s:.1f}/s); unexpected outcomes: {st.n_bad}; "
          f"valid answers differing from the recorded greedy one: {st.wrong}; of them another prompt's answer: {st.crosstalk}")
    for b in st.bad:
        print("  " + b)
    m = {k: v for k, v in re.findall(r"^(celer_requests_cancelled_total|celer_requests_rejected_total) (\S+)",
                                     metrics.decode(), re.M)} if status_m == 200 else {}
    print(f"server metrics: cancelled {m.get('celer_requests_cancelled_total', '?')}, "
          f"rejected (503) {m.get('celer_requests_rejected_total', '?')}")
    print(f"RSS (MiB): loaded {rss_loaded / 1024:.1f}, after recording {rss_recorded / 1024:.1f}, after warm-up "
          f"{rss_warm / 1024:.1f}, after soak {rss_after / 1024:.1f}, after re-recording {rss_final / 1024:.1f} "
          f"(limit {rss_limit / 1024:.1f})")
    print(f"after: /health {hs}, greedy answers identical to before: {same}, crashes: {crashes}, "
          f"SIGTERM exit status: {rc}; wall {time.time() - t_start:.0f} s")
    okay = st.n_bad == 0 and st.wrong == 0 and same and hs == 200 and crashes == 0 and rss_ok
    print("soak: PASS" if okay else "soak: FAIL")
    sys.exit(0 if okay else 1)


if __name__ == "__main__":
    main()
