"""Pure-Python safetensors reader/writer (numpy + torch; the `safetensors` package is not
needed), byte-compatible with the official library:

  8-byte little-endian u64 N | N bytes of JSON header | data section
  header: {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..],
           "data_offsets": [begin, end]}, ...}, offsets relative to the data section,
  padded with spaces so that N is a multiple of 8; tensors laid out in the official order
  (dtype alignment descending, then name), without holes.

    tensors, metadata = load_file(path)      # dict name -> torch.Tensor, dict str -> str
    save_file(tensors, path, metadata=None)  # tensors: torch.Tensor or numpy arrays
    serialize(tensors, metadata=None) -> bytes

U16 is loaded as a numpy uint16 array: torch 1.13 has no uint16 dtype.
"""
import json
import struct

import numpy as np
import torch

# name -> (torch dtype or None, numpy dtype used for the bytes, rank in the official order)
# The rank is the position in the official Rust `Dtype` enum, whose derived ordering the
# official writer sorts by (descending) so that wider types come first.
_DTYPES = {
    "BOOL": (torch.bool, np.bool_, 0),
    "U8": (torch.uint8, np.uint8, 1),
    "I8": (torch.int8, np.int8, 2),
    "I16": (torch.int16, np.int16, 5),
    "U16": (None, np.uint16, 6),
    "F16": (torch.float16, np.float16, 7),
    "BF16": (torch.bfloat16, np.int16, 8),
    "I32": (torch.int32, np.int32, 9),
    "F32": (torch.float32, np.float32, 11),
    "F64": (torch.float64, np.float64, 12),
    "I64": (torch.int64, np.int64, 13),
}
_TORCH_TO_NAME = {v[0]: k for k, v in _DTYPES.items() if v[0] is not None}
_NUMPY_TO_NAME = {np.dtype(np.bool_): "BOOL", np.dtype(np.uint8): "U8", np.dtype(np.int8): "I8",
                  np.dtype(np.int16): "I16", np.dtype(np.uint16): "U16",
                  np.dtype(np.float16): "F16", np.dtype(np.int32): "I32",
                  np.dtype(np.float32): "F32", np.dtype(np.float64): "F64",
                  np.dtype(np.int64): "I64"}


def _to_bytes(t):
    """(dtype name, shape list, raw little-endian bytes) of a tensor or numpy array."""
    if isinstance(t, np.ndarray):
        name = _NUMPY_TO_NAME.get(t.dtype)
        if name is None:
            raise ValueError("unsupported numpy dtype %s" % t.dtype)
        a = np.ascontiguousarray(t).astype(t.dtype.newbyteorder("<"), copy=False)
        return name, list(t.shape), a.tobytes()
    if not isinstance(t, torch.Tensor):
        raise TypeError("expected a torch.Tensor or numpy array, got %r" % type(t))
    name = _TORCH_TO_NAME.get(t.dtype)
    if name is None:
        raise ValueError("unsupported torch dtype %s" % t.dtype)
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        a = t.view(torch.int16).numpy()
    else:
        a = t.numpy()
    return name, list(t.shape), np.ascontiguousarray(a).tobytes()


def serialize(tensors, metadata=None):
    entries = []
    for k, t in tensors.items():
        if not isinstance(k, str) or k == "__metadata__":
            raise ValueError("invalid tensor name %r" % (k,))
        dt, shape, raw = _to_bytes(t)
        entries.append((k, dt, shape, raw))
    entries.sort(key=lambda e: (-_DTYPES[e[1]][2], e[0]))
    header = {}
    if metadata is not None:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ValueError("metadata must map str to str")
        header["__metadata__"] = dict(metadata)
    off = 0
    for k, dt, shape, raw in entries:
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    hb = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(e[3] for e in entries)


def save_file(tensors, path, metadata=None):
    with open(path, "wb") as f:
        f.write(serialize(tensors, metadata))


def read_header(buf):
    """(header dict, data section bytes) of a serialized file; validates like load_file."""
    if len(buf) < 8:
        raise ValueError("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > len(buf) - 8:
        raise ValueError("header length %d exceeds file size" % n)
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    data = buf[8 + n:]
    spans = []
    for k, v in header.items():
        if k == "__metadata__":
            if not all(isinstance(a, str) and isinstance(b, str) for a, b in v.items()):
                raise ValueError("__metadata__ must map str to str")
            continue
        if v["dtype"] not in _DTYPES:
            raise ValueError("%s: unknown dtype %r" % (k, v["dtype"]))
        b, e = v["data_offsets"]
        numel = int(np.prod(v["shape"], dtype=np.int64))
        if not (0 <= b <= e <= len(data)):
            raise ValueError("%s: data_offsets out of range" % k)
        if e - b != numel * np.dtype(_DTYPES[v["dtype"]][1]).itemsize:
            raise ValueError("%s: byte size does not match shape" % k)
        spans.append((b, e, k))
    spans.sort()
    pos = 0
    for b, e, k in spans:
        if b != pos:
            raise ValueError("%s: data section has a hole or overlap at %d" % (k, pos))
        pos = e
    if pos != len(data):
        raise ValueError("data section has %d trailing bytes" % (len(data) - pos))
    return header, data


def load_bytes(buf):
    header, data = read_header(buf)
    meta = header.get("__metadata__", {})
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        tdt, ndt, _ = _DTYPES[v["dtype"]]
        b, e = v["data_offsets"]
        a = np.frombuffer(data[b:e], dtype=np.dtype(ndt).newbyteorder("<")).astype(ndt)
        a = a.reshape(v["shape"]).copy()
        if tdt is None:
            out[k] = a
        elif tdt == torch.bfloat16:
            out[k] = torch.from_numpy(a).view(torch.bfloat16)
        else:
            out[k] = torch.from_numpy(a)
    return out, meta


def load_file(path):
    with open(path, "rb") as f:
        return load_bytes(f.read())


if __name__ == "__main__":
    # Self-check: round trip of every dtype through bytes.
    g = torch.Generator().manual_seed(0)
    ts = {
        "f32": torch.randn(3, 4, generator=g), "f16": torch.randn(5, generator=g).half(),
        "bf16": torch.randn(2, 3, generator=g).bfloat16(), "f64": torch.randn(2, generator=g).double(),
        "i32": torch.arange(-3, 3, dtype=torch.int32), "i64": torch.tensor([1 << 40, -5]),
        "u8": torch.tensor([0, 255], dtype=torch.uint8), "bool": torch.tensor([True, False]),
        "i16": torch.tensor([-32768, 7], dtype=torch.int16), "i8": torch.tensor([-128, 127], dtype=torch.int8),
        "u16": np.array([0, 65535], dtype=np.uint16), "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 3),
    }
    buf = serialize(ts, {"k": "v"})
    back, meta = load_bytes(buf)
    assert meta == {"k": "v"}
    for k, t in ts.items():
        b = back[k]
        if isinstance(t, np.ndarray):
            assert isinstance(b, np.ndarray) and b.dtype == t.dtype and (b == t).all(), k
        else:
            assert b.dtype == t.dtype and b.shape == t.shape and torch.equal(b, t), k
    print("st.py self-check ok (%d bytes)" % len(buf))
