"""Token shards for the shell tests, in src/train/data.c's layout: a header of 256 little-endian
int32 (magic 20240520, version, token count, zeros), then the tokens as uint16 (version 1) or
uint32 (version 2).

    python3 tests/ref/shards.py DIR N_TRAIN N_VAL
        DIR/train.bin and DIR/val.bin: the first N_TRAIN and the next N_VAL tokens of
        periodic(N_TRAIN + N_VAL), the corpus the training tests share

From Python (sys.path.insert(0, "tests/ref")): write(path, tokens), periodic(n, seed)."""
import sys

import numpy as np

MAGIC, VERSION = 20240520, 1


def write(path, tokens, version=VERSION):
    """version 1: uint16 tokens; 2: uint32 (llm.c's Llama 3 shards)."""
    toks = np.asarray(tokens)
    if toks.size and (toks.min() < 0 or toks.max() > (65535 if version == 1 else 2**31 - 1)):
        raise ValueError("shard tokens must fit in uint16 (version 1)" if version == 1 else "token ids must be >= 0")
    h = np.zeros(256, dtype="<i4")
    h[0], h[1], h[2] = MAGIC, version, toks.size
    with open(path, "wb") as f:
        f.write(h.tobytes() + toks.astype("<u2" if version == 1 else "<u4").tobytes())


def periodic(n, seed=0):
    """n tokens over a 64-token vocabulary: a ramp of step 7 modulo 61, and with
    probability 0.2 a uniform token instead (learnable, but not trivially)."""
    rng = np.random.default_rng(seed)
    return np.where(rng.random(n) < 0.2, rng.integers(0, 64, n), (np.arange(n) * 7) % 61)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    d, n_train, n_val = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    t = periodic(n_train + n_val)
    write(d + "/train.bin", t[:n_train])
    write(d + "/val.bin", t[n_train:])
