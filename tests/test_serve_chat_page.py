"""The chat page of `skiplm serve` (GET /, server/chat.html compiled into the binary) in a real
headless browser: Debian's chromium driven by puppeteer-core (tests/ref/chat_page.mjs). SKIP
when chromium is not installed (scripts/install_deps.sh installs it).

1. GET / is the page (text/html, no API key needed), and it lists the model;
2. with temperature 0 and max tokens 12 set in the page, a message's reply streams into the page
   (its length grows over several updates) and equals the greedy reply of POST
   /v1/chat/completions for the same conversation; the screenshot after differs from before;
3. Stop, pressed while a long reply streams, ends it (the page says stopped, Send is enabled
   again) and the server logs the client gone; no error in the page's console."""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sktest import ROOT, check, finish  # noqa: E402
from test_serve import Server, clean, curl, make_model, run  # noqa: E402


def main():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("SKIP the chat page's browser test: no chromium (apt-get install chromium, or bash scripts/install_deps.sh)")
        return
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "chatty")
    # slow enough (6 layers of 384) that a long reply still streams when Stop is pressed
    if not check(make_model(model, "--n_layer", "6", "--n_head", "6", "--n_embd", "384", "--block_size", "1024", chars=True, scale=4.0),
                 "a model with a character vocabulary and a chat template"):
        finish()
    srv = Server(model, "--parallel", "2", "--tokenizer", os.path.join(model, "vocab.json"), "--api-key", "k3y")
    if not check(srv.port is not None, f"the server starts ({srv.log()[-300:]})"):
        finish()
    try:
        code, page = curl(srv, "/")
        check(code == 200 and page.startswith("<!DOCTYPE html>") and "/v1/chat/completions" in page, "GET /: the chat page, without the API key")
        code, _ = curl(srv, "/", method="POST")
        check(code == 405, "POST /: 405")
    finally:
        srv.stop()
    srv = Server(model, "--parallel", "2", "--tokenizer", os.path.join(model, "vocab.json"))
    try:
        r = run(["node", os.path.join(HERE, "ref", "chat_page.mjs"), chromium, srv.url + "/", tmp], timeout=180, cwd=ROOT)
        got = json.loads(r.stdout) if r.returncode == 0 and r.stdout.startswith("{") else {"error": r.stderr[-1500:]}
        if got.get("error"):
            print(got["error"])
        code, out = curl(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 12, "temperature": 0})
        want = json.loads(out)["choices"][0]["message"]["content"] if code == 200 else None
        check(got.get("title") == "skiplm" and "chatty" in got.get("model", ""), f"the page loads and lists the model ({got.get('model')})")
        lens = got.get("chunks", [])
        check(got.get("state") == "done" and got.get("reply") == want and want and len(set(lens)) >= 3 and lens == sorted(lens),
              f"a reply streams into the page ({len(set(lens))} lengths as it grew) and equals the API's greedy reply "
              f"({got.get('reply')!r} vs {want!r})")
        check(got.get("changed") is True and os.path.getsize(os.path.join(tmp, "after.png")) > 1000,
              "the screenshot after the reply differs from the one before")
        check(got.get("stopped_state") == "stopped" and got.get("stopped_len", 0) > 0 and got.get("send_enabled") is True,
              f"Stop ends a streaming reply ({got.get('stopped_len')} characters), Send enabled again")
        check(not got.get("errors"), f"no error in the page's console ({got.get('errors')})")
    finally:
        check(srv.stop() == 0, "the server exits 0")
    check("went away after" in srv.log(), "the server logged the stopped stream's client gone")
    clean(srv)
    finish()


if __name__ == "__main__":
    main()
