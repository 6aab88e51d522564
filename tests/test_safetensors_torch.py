"""safetensors interoperability: files written by the pure-Python reference
(tests/ref/st.py, byte-compatible with the official library) are read by the C reader,
and files written by the C writer are read by Python bit-exactly. Uses build/tests/tool_st."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sktest import BUILD, check, finish  # noqa: E402
from ref import st  # noqa: E402

TOOL = os.path.join(BUILD, "tests", "tool_st")


def tool(*args):
    return subprocess.run([TOOL] + list(args), capture_output=True, text=True)


def dump(path):
    r = tool("dump", path)
    if r.returncode != 0:
        raise RuntimeError("tool_st dump failed: " + r.stderr)
    tensors, f32, meta = {}, {}, {}
    for line in r.stdout.splitlines():
        parts = line.split(" ")
        unhex = lambda s: b"" if s == "-" else bytes.fromhex(s)
        if parts[0] == "tensor":
            shape = [] if parts[3] == "-" else [int(x) for x in parts[3].split(",")]
            tensors[unhex(parts[1]).decode()] = (parts[2], shape, unhex(parts[4]))
        elif parts[0] == "f32":
            f32[unhex(parts[1]).decode()] = np.frombuffer(unhex(parts[2]), dtype="<f4")
        elif parts[0] == "meta":
            meta[unhex(parts[1]).decode()] = unhex(parts[2]).decode()
    return tensors, f32, meta


def raw_bytes(t):
    return st._to_bytes(t)[2]


def bits_equal(a, b):
    """float32 arrays equal bit for bit (NaN payloads and -0 included)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    return a.shape == b.shape and a.view(np.uint32).tolist() == b.view(np.uint32).tolist()


def main():
    tmp = tempfile.mkdtemp(prefix="sk_st_torch_")
    try:
        run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(tmp):
    g = torch.Generator().manual_seed(1234)
    special = torch.tensor([0.0, -0.0, 1.0, -2.5, 65504.0, 6e-8, 1e-5, float("inf"), float("-inf"), float("nan")])
    tensors = {
        "transformer.wte.weight": torch.randn(7, 5, generator=g),
        "transformer.h.0.attn.c_attn.weight": torch.randn(12, 4, generator=g),
        "f16": torch.cat([torch.randn(20, generator=g), special]).half(),
        "bf16": torch.cat([torch.randn(6, generator=g) * 1e20, special]).bfloat16().reshape(2, 8),
        "f64": torch.tensor([3.141592653589793, 1e-300, -1e300, 1.0000001]).double(),
        "i64": torch.tensor([[-(1 << 62), 7], [0, (1 << 40) + 3]]),
        "i32": torch.arange(-5, 5, dtype=torch.int32),
        "u8": torch.arange(250, 256, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "i16": torch.tensor([-32768, 32767], dtype=torch.int16),
        "i8": torch.tensor([-128, 127, 0], dtype=torch.int8),
        "u16": np.array([0, 1, 65535], dtype=np.uint16),
        "scalar": torch.tensor(-1.25),
        "empty": torch.zeros(0, 3),
    }
    cfg = json.dumps({"n_layer": 2, "n_embd": 64, "name": "caf\u00e9 \u2603 \"q\"\n"})
    meta = {"format": "pt", "config": cfg, "empty": ""}
    a = os.path.join(tmp, "a.safetensors")
    st.save_file(tensors, a, metadata=meta)

    # --- Python writes, C reads
    try:
        ct, cf, cm = dump(a)
    except RuntimeError as e:
        check(False, "C reads a Python-written file: %s" % e)
        return
    check(set(ct) == set(tensors), "C sees all %d tensors" % len(tensors))
    check(cm == meta, "C reads __metadata__ (unicode, quotes, newline, empty value)")
    for name, t in tensors.items():
        dt, shape, raw = ct.get(name, (None, None, None))
        want_dt = st._to_bytes(t)[0]
        check(dt == want_dt and shape == list(t.shape) and raw == raw_bytes(t),
              "C reads %s (%s %s) bit-exactly" % (name, want_dt, list(t.shape)))
        if want_dt in ("F32", "F16", "BF16", "F64"):
            ref = t.float().numpy().reshape(-1)
            got = cf.get(name)
            ok = got is not None and bits_equal(got, ref)
            if not ok and got is not None and len(got) == len(ref):
                print("  max diff %s: %g" % (name, np.nanmax(np.abs(got - ref))))
            check(ok, "sk_st_get_f32(%s) == torch .float() bit for bit" % name)

    # --- C rewrites the Python file: same order, same bytes as the reference writer
    b = os.path.join(tmp, "b.safetensors")
    r = tool("copy", a, b)
    check(r.returncode == 0, "C copies the file (%s)" % r.stderr.strip())
    if r.returncode == 0:
        ba, bb = open(a, "rb").read(), open(b, "rb").read()
        check(ba == bb, "C writer output is byte-identical to the reference writer (%d bytes)" % len(ba))
        back, bmeta = st.load_file(b)
        ok = bmeta == meta
        for name, t in tensors.items():
            u = back.get(name)
            if isinstance(t, np.ndarray):
                ok &= isinstance(u, np.ndarray) and u.dtype == t.dtype and np.array_equal(u, t)
            else:
                ok &= u is not None and u.dtype == t.dtype and u.shape == t.shape and raw_bytes(u) == raw_bytes(t)
        check(ok, "Python reads the C-written copy bit-exactly")

    # --- C writes its own file, Python checks the values
    c = os.path.join(tmp, "c.safetensors")
    r = tool("write", c)
    check(r.returncode == 0, "C writes a file (%s)" % r.stderr.strip())
    if r.returncode == 0:
        buf = open(c, "rb").read()
        (n,) = struct.unpack("<Q", buf[:8])
        check(n % 8 == 0, "C header length %d is a multiple of 8" % n)
        got, gmeta = st.load_file(c)
        check(list(got) == ["transformer.wte.weight", "h.f16", "h.bf16", "steps", "bytes"],
              "C writes tensors in insertion order")
        check(gmeta == {"format": "pt", "config": "{\"n_layer\":2,\"note\":\"caf\u00e9 \\\"q\\\"\\n\"}"},
              "C metadata read by Python")
        want_f32 = torch.arange(12, dtype=torch.float32).reshape(4, 3) * 0.25 - 1
        check(torch.equal(got["transformer.wte.weight"], want_f32), "C f32 (4,3) values")
        f16 = []
        i = 0
        while len(f16) < 16:
            v = (i * 997) & 0xFFFF
            i += 1
            if ((v >> 10) & 0x1F) == 0x1F and (v & 0x3FF):
                continue
            f16.append(v)
        want16 = torch.from_numpy(np.array(f16, dtype=np.uint16).view(np.int16)).view(torch.float16)
        check(got["h.f16"].dtype == torch.float16 and raw_bytes(got["h.f16"]) == raw_bytes(want16), "C f16 bits")
        want_bf = torch.tensor([0x3F80 + 7 * i for i in range(6)], dtype=torch.int16).view(torch.bfloat16).reshape(2, 3)
        check(got["h.bf16"].dtype == torch.bfloat16 and raw_bytes(got["h.bf16"]) == raw_bytes(want_bf), "C bf16 bits")
        check(torch.equal(got["steps"], torch.tensor([(i - 2) * 10**12 for i in range(5)])), "C i64 values")
        check(torch.equal(got["bytes"], torch.tensor([250, 251, 252], dtype=torch.uint8)), "C u8 values")

    # --- files the official format forbids: C refuses, naming file and tensor
    def write_raw(name, header, data):
        p = os.path.join(tmp, name)
        hb = json.dumps(header).encode()
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", len(hb)) + hb + data)
        return p

    hole = write_raw("hole.safetensors", {"w.a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                          "w.b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, bytes(12))
    r = tool("check", hole)
    check(r.returncode == 2 and "hole.safetensors" in r.stderr and "w.b" in r.stderr,
          "C refuses a hole: %s" % r.stderr.strip())
    short = os.path.join(tmp, "short.safetensors")
    with open(a, "rb") as f:
        data = f.read()
    with open(short, "wb") as f:
        f.write(data[:-1])
    r = tool("check", short)
    check(r.returncode == 2 and "short.safetensors" in r.stderr, "C refuses a truncated file: %s" % r.stderr.strip())
    try:
        st.load_file(short)
        check(False, "reference reader refuses the truncated file")
    except ValueError:
        check(True, "reference reader refuses the truncated file")


if __name__ == "__main__":
    main()
    finish()
