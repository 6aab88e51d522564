"""Reference byte-level BPE trainer for tests/test_bpe_train.py: the straightforward
algorithm that recounts every pair before every merge. Same rules as src/text/bpe_train.c:

- pre-tokenization: GPT-2's regex; here written with Python's `re` over bytes with ASCII
  classes, which equals the JS regex (with \\p{L}, \\p{N}) only for ASCII text, so callers
  must pass ASCII documents;
- ids 0..255 are the bytes in GPT-2's order (their display code points ascending);
- count of a pair = adjacent positions holding it in each distinct pre-token x its frequency;
- the pair with the highest count wins, ties to the lowest (first id, second id);
- a merge rewrites each word left to right without overlap;
- then the specials in the given order, then <|endoftext|> as the last id.

    python3 tests/ref/bpe_ref.py VOCAB_SIZE FILE...   prints the merges, one per line
"""
import re
import sys
from collections import Counter

PRETOK = re.compile(rb"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")
EOT = "<|endoftext|>"


def bytes_to_unicode():
    """GPT-2's printable stand-in for each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()
BYTE_OF_ID = sorted(range(256), key=lambda b: ord(B2U[b]))     # id -> byte


def display(bs):
    return "".join(B2U[b] for b in bs)


def pretokenize(doc):
    assert all(c < 128 for c in doc), "the reference pre-tokenizer is exact for ASCII text only"
    words = PRETOK.findall(doc)
    assert b"".join(words) == doc
    return words


def train(docs, vocab_size, specials=()):
    """docs: list of bytes. Returns (merges as (id_a, id_b) list, token bytes by id)."""
    specials = [s for s in specials if s != EOT] + [EOT]
    tokens = [bytes([b]) for b in BYTE_OF_ID]
    id_of = {b: i for i, b in enumerate(BYTE_OF_ID)}
    freq = Counter()
    for d in docs:
        freq.update(pretokenize(d))
    words = [[id_of[c] for c in w] for w in freq]
    counts = list(freq.values())
    merges = []
    while len(tokens) < vocab_size - len(specials):
        pairs = Counter()
        for w, f in zip(words, counts):
            for p in zip(w, w[1:]):
                pairs[p] += f
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p[0], p[1]))
        x = len(tokens)
        tokens.append(tokens[best[0]] + tokens[best[1]])
        merges.append(best)
        for k, w in enumerate(words):
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(x)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[k] = out
    tokens += [s.encode() for s in specials]
    return merges, tokens


def files(merges, tokens):
    """(vocab.bpe lines after the version line, encoder dict) as GPT-2 writes them."""
    lines = [display(tokens[a]) + " " + display(tokens[b]) for a, b in merges]
    return lines, {display(t): i for i, t in enumerate(tokens)}


if __name__ == "__main__":
    docs = [open(p, "rb").read() for p in sys.argv[2:]]
    m, t = train(docs, int(sys.argv[1]))
    print("\n".join(files(m, t)[0]))
