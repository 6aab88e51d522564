"""The edges of `skiplm serve`'s HTTP side, each with a raw socket or curl, and the client it
concerns where there is one (OpenAI's official `openai` npm package, tests/ref/openai_client.mjs):

1. a CORS preflight allows the headers it asks for (the openai package's x-stainless-*), and
   --cors-headers when it asks for none;
2. request framing: two Content-Length values that disagree get one 400; Transfer-Encoding
   "gzip, chunked" one 501 at once (no thread held); a malformed Content-Length, and one past
   2^64, one answer with exactly one status line (libmicrohttpd 0.9.75 alone writes two);
   chunked and duplicate equal lengths still work;
3. an upload that stalls mid-body is closed after --timeout and logged as such (its bytes);
4. n > --parallel runs part by part: choice k equals the same request's choice alone
   (seed S+k), and a request of n = 3 does not wait for a second free slot while one is free;
5. top_p 0 is the most likely token (temperature 0's reply); top_p out of range names [0, 1];
6. --alias twice: both names listed and accepted, another refused; --any-model accepts any;
7. a stream dropped by its client is logged with the tokens it was sent (not 0);
8. SIGTERM with --grace 1 and a client stalled mid-upload: a queued request gets 503
   server_shutting_down, a running stream an error event with that code then [DONE], and the
   server exits 0 within --grace and two seconds, the stalled upload logged unanswered."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sktest import check, finish  # noqa: E402
from test_serve import Server, clean, client, curl, make_model  # noqa: E402


def raw(port, data, wait=5.0, pause=None):
    """bytes sent on a fresh connection (a list: pieces with `pause` seconds between), what came
    back until the server closed (or wait seconds), and the seconds that took"""
    s = socket.create_connection(("127.0.0.1", port))
    t = time.time()
    for k, piece in enumerate(data if isinstance(data, list) else [data]):
        if k and pause:
            time.sleep(pause)
        s.sendall(piece)
    s.settimeout(wait)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except socket.timeout:
        out += b"<no close>"
    except ConnectionResetError:
        pass
    s.close()
    return out, time.time() - t


def one_answer(out, status):
    """exactly one status line, the status, OpenAI's error object as the body"""
    lines = re.findall(rb"HTTP/1\.[01] \d{3}", out)
    head, _, body = out.partition(b"\r\n\r\n")
    try:
        err = json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        err = {}
    return len(lines) == 1 and head.startswith(b"HTTP/1.1 %d" % status) and bool(err.get("message")), err


def framing(srv):
    body = b'{"prompt": "Hi", "max_tokens": 2}'
    post = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    out, dt = raw(srv.port, post + b"Content-Length: %d\r\nContent-Length: 5\r\n\r\n" % len(body) + body)
    ok, err = one_answer(out, 400)
    check(ok and "disagree" in err.get("message", "") and dt < 2, f"two Content-Length values that disagree: one 400 ({err.get('message')})")
    out, _ = raw(srv.port, post + b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(body), len(body)) + body)
    check(out.startswith(b"HTTP/1.1 200") and b'"text"' in out, "two equal Content-Length values: answered (200)")
    out, dt = raw(srv.port, post + b"Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    ok, err = one_answer(out, 501)
    check(ok and "gzip" in err.get("message", "") and b"<no close>" not in out and dt < 2,
          f"Transfer-Encoding 'gzip, chunked': one 501 at once, the connection closed ({dt:.2f} s; {err.get('message')})")
    out, _ = raw(srv.port, post + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    check(out.startswith(b"HTTP/1.1 200") and b'"text"' in out, "a chunked body: answered (200)")
    for value, status in ((b"abc", 400), (b"12x", 400), (b"", 400), (b"99999999999999999999999", 413)):
        out, dt = raw(srv.port, post + b"Content-Length: " + value + b"\r\n\r\n" + body)
        ok, err = one_answer(out, status)
        check(ok and dt < 2, f"Content-Length {value.decode()!r}: one answer, {status}, exactly one status line "
                             f"({len(re.findall(rb'HTTP/1', out))} status lines; {err.get('message')})")
    time.sleep(0.2)
    check(re.search(r"POST /v1/completions 400 prompt=0 .*error=\"the Content-Length header is not a number of bytes: '12x'\"", srv.log()),
          "a malformed Content-Length's answer is in the access log, with the request's method and path")


def cors(srv):
    asked = "authorization, content-type, x-stainless-os, x-stainless-retry-count"
    code, out = curl(srv, "/v1/chat/completions", None, ["Origin: http://example.com", "Access-Control-Request-Method: POST",
                                                          f"Access-Control-Request-Headers: {asked}"], method="OPTIONS")
    r = subprocess.run(["curl", "-s", "-i", "-X", "OPTIONS", srv.url + "/v1/chat/completions", "-H", "Origin: http://example.com",
                        "-H", "Access-Control-Request-Method: POST", "-H", f"Access-Control-Request-Headers: {asked}"],
                       capture_output=True, text=True, timeout=30)
    allowed = re.search(r"(?im)^Access-Control-Allow-Headers: (.*?)\r?$", r.stdout)
    check(code == 204 and allowed and allowed.group(1) == asked,
          f"a CORS preflight allows the headers it asks for, the openai package's x-stainless-* too ({allowed and allowed.group(1)})")
    r = subprocess.run(["curl", "-s", "-i", "-X", "OPTIONS", srv.url + "/v1/models", "-H", "Origin: http://example.com"],
                       capture_output=True, text=True, timeout=30)
    allowed = re.search(r"(?im)^Access-Control-Allow-Headers: (.*?)\r?$", r.stdout)
    check(allowed and allowed.group(1) == "Authorization, Content-Type, X-Trace",
          f"a preflight that asks for none gets --cors-headers ({allowed and allowed.group(1)})")
    r = subprocess.run(["curl", "-s", "-i", "-X", "OPTIONS", srv.url + "/v1/models", "-H", "Access-Control-Request-Headers: a\u00e9b"],
                       capture_output=True, text=True, timeout=30)
    allowed = re.search(r"(?im)^Access-Control-Allow-Headers: (.*?)\r?$", r.stdout)
    check(allowed and allowed.group(1) == "Authorization, Content-Type, X-Trace", "a preflight asking for a name that is not a header name gets the list")


def stalled_upload(srv):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    out, dt = raw(srv.port, [head, b'{"prompt": "'], wait=6, pause=0.2)
    time.sleep(0.2)
    line = [x for x in srv.log().splitlines() if "timed out" in x]
    check(b"<no close>" not in out and 0.9 < dt < 4 and line and re.search(r" - prompt=0 .*after 12 bytes of the body", line[-1]),
          f"an upload that stalls mid-body is closed after --timeout 1 ({dt:.1f} s) and logged as such ({line[-1:] and line[-1][20:]})")


def sampling(srv):
    base = {"prompt": "Once upon", "max_tokens": 12}
    code, greedy = curl(srv, "/v1/completions", {**base, "temperature": 0})
    code2, top0 = curl(srv, "/v1/completions", {**base, "top_p": 0, "temperature": 1.5, "seed": 4})
    text = lambda o: (json.loads(o).get("choices") or [{}])[0].get("text", o)  # noqa: E731
    check(code == 200 and code2 == 200 and text(greedy) == text(top0), f"top_p 0: the most likely token each step, as temperature 0 ({text(top0)!r})")
    msgs = []
    for v in (-0.1, 1.5):
        code, out = curl(srv, "/v1/completions", {**base, "top_p": v})
        msgs.append(json.loads(out)["error"]["message"] if code == 400 else out)
    check(all("'top_p' must be in [0, 1]" in m for m in msgs), f"top_p out of range on either side: one message ({msgs})")


def more_than_parallel(srv):
    """--parallel 2: n = 5 runs in parts; choice k equals choice 0 of the same request with seed S+k"""
    p = {"prompt": "The", "max_tokens": 8, "temperature": 1.0, "seed": 40}
    got = client(srv, [{"kind": "completion", "params": {**p, "n": 5}}, {"kind": "completion", "params": {**p, "n": 5, "stream": True}}] +
                 [{"kind": "completion", "params": {**p, "seed": 40 + k}} for k in range(5)])
    alone = [g.get("texts", [None])[0] for g in got[2:]]
    check(got[0].get("texts") == alone and got[1].get("texts") == alone and len(set(alone)) > 1 and got[0]["usage"]["prompt_tokens"] == 3,
          f"n = 5 through --parallel 2, streamed and not: choice k equals the request alone with seed 40+k, the prompt counted once "
          f"({alone!r:.100}; {got[0].get('texts')!r:.100}; {got[0].get('usage')})")
    # one slot busy with a long stream: a request of n = 3 runs in the free one meanwhile
    long = subprocess.Popen(["curl", "-sN", "--data-binary", json.dumps({"prompt": "Once", "max_tokens": 1000, "stream": True}),
                             srv.url + "/v1/completions"], stdout=subprocess.PIPE)
    long.stdout.readline()
    code, out = curl(srv, "/v1/completions", {**p, "n": 3})
    running = long.poll() is None
    long.kill()
    long.wait()
    check(code == 200 and len(json.loads(out)["choices"]) == 3 and running,
          f"n = 3 with one slot of two free: done while the long stream still runs ({code}, the stream running: {running})")
    code, out = curl(srv, "/v1/completions", {**p, "n": 999})
    check(code == 400 and json.loads(out)["error"]["param"] == "n", "n = 999: 400 naming 'n'")


def names(srv):
    g = client(srv, [{"kind": "models"}])[0]
    codes = [curl(srv, "/v1/completions", {"model": m, "prompt": "a", "max_tokens": 1})[0] for m in ("first", "second", "gpt-3.5-turbo")]
    check(g.get("ids") == ["first", "second"] and codes == [200, 200, 404],
          f"--alias twice: /v1/models lists both ({g.get('ids')}), both accepted, another name 404 ({codes})")


def dropped_stream(srv):
    p = subprocess.Popen(["curl", "-sN", "--data-binary", json.dumps({"prompt": "Once", "max_tokens": 1000, "stream": True}),
                          srv.url + "/v1/completions"], stdout=subprocess.PIPE)
    for _ in range(3):
        p.stdout.readline()
    p.kill()
    p.wait()
    line = []
    for _ in range(100):
        line = [x for x in srv.log().splitlines() if "went away after" in x]
        if line:
            break
        time.sleep(0.05)
    m = re.search(r"completion=(\d+) .*went away after (\d+) of (\d+) new tokens were sent", line[-1]) if line else None
    check(m and int(m.group(1)) == int(m.group(2)) >= 2 and int(m.group(3)) >= int(m.group(2)),
          f"a dropped stream is logged with the tokens it was sent ({line[-1][20:] if line else srv.log()[-200:]})")


def shutdown(model):
    srv = Server(model, "--parallel", "1", "--grace", "1", "--tokenizer", os.path.join(model, "vocab.json"))
    if not check(srv.port is not None, "serve --grace 1 starts"):
        return
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\""
    stalled = socket.create_connection(("127.0.0.1", srv.port))
    stalled.sendall(head)
    stream = subprocess.Popen(["curl", "-sN", "--data-binary", json.dumps({"prompt": "Once", "max_tokens": 1000, "stream": True}),
                               srv.url + "/v1/completions"], stdout=subprocess.PIPE)
    stream.stdout.readline()
    queued = subprocess.Popen(["curl", "-s", "--data-binary", json.dumps({"prompt": "Then", "max_tokens": 5}), srv.url + "/v1/completions"],
                              stdout=subprocess.PIPE)
    for _ in range(100):
        if json.loads(curl(srv, "/health")[1]).get("queued") == 1:
            break
        time.sleep(0.02)
    t = time.time()
    srv.p.send_signal(signal.SIGTERM)
    try:
        rc = srv.p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        rc = None
    took = time.time() - t
    q = json.loads(queued.communicate(timeout=10)[0] or b"{}").get("error", {})
    rest = stream.communicate(timeout=10)[0].decode()
    stalled.close()
    events = [json.loads(e[6:]) for e in rest.split("\n\n") if e.startswith("data: {")]
    last = events[-1].get("error", {}) if events else {}
    log = srv.log()
    check(q.get("code") == "server_shutting_down" and q.get("type") == "server_error",
          f"SIGTERM: a queued request gets 503 server_shutting_down, as docs/serving.md says ({q})")
    check(last.get("code") == "server_shutting_down" and rest.rstrip().endswith("data: [DONE]") and "--grace ran out" in last.get("message", ""),
          f"SIGTERM: a stream still running at --grace gets an error event with that code, then [DONE] ({last})")
    check(rc == 0 and took < 1 + 3, f"SIGTERM with a client stalled mid-upload: exit 0 within --grace 1 and two seconds, not "
                                    f"held by the upload ({took:.2f} s)")
    check(re.search(r"POST /v1/completions - prompt=0 .*error=\"the server stopped after 9 bytes of the body; closed without an answer\"", log),
          f"the stalled upload is logged unanswered, with its bytes ({[x for x in log.splitlines() if ' - ' in x][-1:]})")
    clean(srv)


def main():
    tmp = tempfile.mkdtemp()
    model, slow = os.path.join(tmp, "m"), os.path.join(tmp, "slow")
    ok = make_model(model, "--n_layer", "1", "--n_head", "2", "--n_embd", "32", "--block_size", "256")
    ok = ok and make_model(slow, "--n_layer", "4", "--n_head", "4", "--n_embd", "256", "--block_size", "1024", chars=True)
    # a model slow enough that a 1000-token stream outlives --grace 1 on any machine
    slower = os.path.join(tmp, "slower")
    ok = ok and make_model(slower, "--n_layer", "8", "--n_head", "8", "--n_embd", "512", "--block_size", "1024", chars=True)
    if not check(ok, "models for the server"):
        finish()
    srv = Server(model, "--parallel", "2", "--timeout", "1", "--alias", "first", "--alias", "second",
                 "--cors-headers", "Authorization, Content-Type, X-Trace")
    if not check(srv.port is not None, f"the server starts ({srv.log()[-300:]})"):
        finish()
    try:
        for f in (framing, cors, stalled_upload, sampling, names):
            f(srv)
    finally:
        check(srv.stop() == 0, "the server exits 0")
    clean(srv)
    srv = Server(slow, "--parallel", "2", "--any-model", "--tokenizer", os.path.join(slow, "vocab.json"))
    try:
        code, _ = curl(srv, "/v1/completions", {"model": "gpt-3.5-turbo", "prompt": "a", "max_tokens": 1})
        check(code == 200, f"--any-model: a request for gpt-3.5-turbo is answered ({code})")
        more_than_parallel(srv)
        dropped_stream(srv)
    finally:
        check(srv.stop() == 0, "the second server exits 0")
    clean(srv)
    shutdown(slower)
    finish()


if __name__ == "__main__":
    main()
