"""skiplm from Python: the C library's models and tokenizers through ctypes (docs/library.md).

    import skiplm
    with skiplm.Model.load("runs/quickstart/ckpt.safetensors") as m, \\
         skiplm.Tokenizer.load("data/sotu-char/vocab.json") as tok:
        ids = tok.encode("Fellow citizens")
        print(tok.decode(m.generate(ids, max_tokens=40, seed=1)))
        print(m.loss(ids), m.logits(ids).shape)      # mean next-token loss; (T, vocab_size)

Pure Python over libskiplm.so (build/libskiplm.so of the repository, `make install`'s, or
the file SKIPLM_LIB names). Arrays come back as NumPy arrays when NumPy is installed, else as
lists. Errors of the library are raised as SkiplmError carrying its message.
"""
import ctypes
import json
import os
import struct

from ._lib import SkiplmError, SkConfig, SkKvcacheParams, SkSafetensors, SkSampling, check, lib, lib_path, libc

try:
    import numpy as _np
except ImportError:   # lists instead of arrays
    _np = None

__all__ = ["Model", "Tokenizer", "Chat", "Trainer", "make_config", "SkiplmError", "lib_path"]

_FAMILY = {0: "gpt2", 1: "llama"}
_GELU = {0: "erf", 1: "tanh"}
_ROPE = {0: "none", 1: "linear", 2: "llama3"}
_WEIGHTS = {"f32": 0, "bf16": 1, "q8": 2}


def _path(p):
    return os.fsencode(os.fspath(p))


def _ids(tokens):
    """A flat ctypes int32 array of the token ids, and the shape they came in ((T,) or (B, T))."""
    if _np is not None and isinstance(tokens, _np.ndarray):
        a = _np.ascontiguousarray(tokens, dtype=_np.int32)
        if a.ndim not in (1, 2):
            raise ValueError("tokens must be 1-D (T,) or 2-D (B, T)")
        return (ctypes.c_int32 * a.size).from_buffer_copy(a.tobytes()), a.shape
    rows = list(tokens)
    if rows and not isinstance(rows[0], (int,)) and hasattr(rows[0], "__len__"):
        rows = [list(r) for r in rows]
        if any(len(r) != len(rows[0]) for r in rows):
            raise ValueError("the rows of a (B, T) batch must have the same length")
        flat = [int(t) for r in rows for t in r]
        shape = (len(rows), len(rows[0]))
    else:
        flat = [int(t) for t in rows]
        shape = (len(flat),)
    return (ctypes.c_int32 * len(flat))(*flat), shape


def _f32(v):
    """A float32 value as the shortest Python float that reads back to it (1e-05, not 9.99e-06)."""
    for digits in range(6, 10):
        s = float(f"{v:.{digits}g}")
        if struct.pack("f", s) == struct.pack("f", v):
            return s
    return v


def _floats(buf, shape):
    """A ctypes float buffer as a NumPy array of shape (a copy), else nested lists."""
    if _np is not None:
        return _np.frombuffer(buf, dtype=_np.float32).reshape(shape).copy()
    flat = list(buf)
    for d in reversed(shape[1:]):
        flat = [flat[i:i + d] for i in range(0, len(flat), d)]
    return flat


def _tokenizer_of(path):
    """The tokenizer path of a weights file or folder, as the CLI's cli_tokenizer_of finds it."""
    f = lib.sk_weights_file(_path(path))
    if not f:
        raise MemoryError("out of memory")
    try:
        file = ctypes.string_at(f)
    finally:
        libc.free(f)
    st = SkSafetensors()
    check(lib.sk_st_read(file, ctypes.byref(st)))
    try:
        p = lib.sk_st_meta(ctypes.byref(st), b"tokenizer_path") or lib.sk_st_meta(ctypes.byref(st), b"tokenizer")
    finally:
        lib.sk_st_free(ctypes.byref(st))
    if p:
        return os.fsdecode(p)
    folder = os.path.dirname(os.fsdecode(file)) or "."
    if any(os.path.exists(os.path.join(folder, n)) for n in ("merges.txt", "vocab.bpe", "tokenizer.json")):
        return folder
    raise SkiplmError(f"{os.fsdecode(file)} records no tokenizer and has none beside it: give one (Tokenizer.load of a "
                      "vocab.json, a tokenizer.json, or a folder with encoder.json and vocab.bpe, or vocab.json and merges.txt)", 1)


class Model:
    """A model loaded by the library (sk_model_load): a skiplm weights file or checkpoint, a
    Hugging Face folder or its model.safetensors. dtype "f32" (default), "bf16" (decoding
    reads a bf16 copy of the matrices, as `skiplm sample --bf16`) or "q8" (the 2-D weights
    quantized to 8 bits, as `skiplm sample --q8` and `skiplm eval --q8`: logits and loss are
    then the quantized model's too); a quantized file is "q8" whatever is asked."""

    def __init__(self, handle, path, dtype):
        self._m = handle
        self.path = path
        self.dtype = dtype

    @classmethod
    def load(cls, path, dtype="f32", device="cpu"):
        if dtype not in _WEIGHTS:
            raise ValueError(f"dtype must be one of {sorted(_WEIGHTS)}, not {dtype!r}")
        check(lib.sk_device_check(device.encode() if isinstance(device, str) else device))
        if device != "cpu":   # a library with CUDA (make cuda) is no shared object: nothing here decodes on a GPU
            raise SkiplmError(f"device {device!r}: the Python package computes on the CPU only", 1)
        h = ctypes.c_void_p()
        check(lib.sk_model_load(ctypes.byref(h), _path(path), None))
        m = cls(h, os.fspath(path), dtype)
        try:
            if dtype == "q8" and not lib.sk_model_q8(h):
                check(lib.sk_model_quantize_q8(h))
            if lib.sk_model_q8(h):
                if dtype == "bf16":
                    raise SkiplmError("the weights are 8-bit (a quantized file): dtype 'bf16' does not apply", 1)
                m.dtype = "q8"
            # a Hugging Face folder's end-of-sequence ids (generation_config.json, config.json)
            eos = (ctypes.c_int32 * 16)()
            n = ctypes.c_int()
            check(lib.sk_hf_eos_ids(_path(path), eos, 16, ctypes.byref(n)))
            m.eos_ids = [eos[i] for i in range(n.value)]
        except BaseException:
            m.close()
            raise
        return m

    # -- lifetime
    def close(self):
        """Free the model (also done by `with` and when the object is collected)."""
        if self._m:
            lib.sk_model_free(self._m)
            self._m = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _h(self):
        if not self._m:
            raise ValueError("the model is closed")
        return self._m

    # -- what it is
    @property
    def config(self):
        """The config (sk_config) as a dict of its fields, named as sk_config_set names them."""
        c = lib.sk_model_config(self._h()).contents
        d = {}
        for name, _ in SkConfig._fields_:
            v = getattr(c, name)
            if name == "family":
                v = _FAMILY.get(v, v)
            elif name == "gelu":
                v = _GELU.get(v, v)
            elif name == "rope_scaling":
                v = _ROPE.get(v, v)
            elif name == "routing":
                v = v.decode("utf-8")
            elif isinstance(v, float):
                v = _f32(v)
            d[name] = v
        return d

    @property
    def vocab_size(self):
        return lib.sk_model_config(self._h()).contents.vocab_size

    @property
    def block_size(self):
        return lib.sk_model_config(self._h()).contents.block_size

    def num_params(self):
        """Floats in the parameter buffer (sk_model_num_params; the padded vocabulary included)."""
        return lib.sk_model_num_params(self._h())

    # -- the full forward pass
    def _forward(self, tokens, targets):
        x, shape = _ids(tokens)
        B, T = (1, shape[0]) if len(shape) == 1 else shape
        y = None
        if targets is not None:
            y, yshape = _ids(targets)
            if tuple(yshape) != tuple(shape):
                raise ValueError(f"targets have shape {tuple(yshape)} but tokens {tuple(shape)}")
        return x, y, shape, B, T

    def logits(self, tokens):
        """The logits of a forward pass (sk_model_forward): tokens (T,) gives (T, vocab_size),
        (B, T) gives (B, T, vocab_size); T at most block_size."""
        x, _, shape, B, T = self._forward(tokens, None)
        V = self.vocab_size
        out = (ctypes.c_float * (B * T * V))()
        loss = ctypes.c_float()
        check(lib.sk_model_forward(self._h(), x, None, B, T, ctypes.byref(loss), out))
        return _floats(out, tuple(shape) + (V,))

    def loss(self, tokens, targets=None):
        """Mean cross-entropy (nats per token). Without targets: of each token after the first
        given those before it (tokens[:-1] predicting tokens[1:]); with targets (the shape of
        tokens, -1 = ignored): of targets given tokens."""
        if targets is None:
            if _np is not None and isinstance(tokens, _np.ndarray):
                tokens, targets = tokens[..., :-1], tokens[..., 1:]
            else:
                rows = list(tokens)
                if rows and hasattr(rows[0], "__len__"):
                    tokens, targets = [list(r)[:-1] for r in rows], [list(r)[1:] for r in rows]
                else:
                    tokens, targets = rows[:-1], rows[1:]
        x, y, _, B, T = self._forward(tokens, targets)
        loss = ctypes.c_float()
        check(lib.sk_model_forward(self._h(), x, y, B, T, ctypes.byref(loss), None))
        return loss.value

    def eval(self, shards, batch=8, seq=None, max_batches=0):
        """The mean loss over token shards as `skiplm eval WEIGHTS SHARD... --batch B --seq T
        --max-batches N` computes it (its windows in order; loss masks beside the shards
        count): a dict with loss, ppl, tokens and batches. seq defaults to block_size."""
        from ._train import evaluate
        return evaluate(self, shards, batch, seq, max_batches)

    # -- cached decoding
    def generate(self, prompt, max_tokens=256, temperature=0.8, top_k=0, top_p=1.0, min_p=0.0,
                 repetition_penalty=1.0, seed=1337, greedy=False, stop=None, kv_bf16=False):
        """An iterator over the new token ids after prompt, one at a time, from a KV cache (sk_model_decode_seq)
        and sk_sample: the tokens `skiplm sample --seed SEED` makes with the same options
        (--bf16 / --q8 as the model's dtype; kv_bf16=True as --kv-bf16, K and V stored in bf16). Stops after max_tokens or at an id of stop
        (default: the Hugging Face folder's end-of-sequence ids, eos_ids; not yielded). A
        prompt longer than block_size is read from its last block_size tokens; when the
        context is full the cache is rebuilt from the newest half, as sample does. The
        arguments are checked at the call; the cache lives while the iterator does
        (list(m.generate(...)) for all the ids at once)."""
        ids = [int(t) for t in prompt]
        if not ids:
            raise ValueError("the prompt needs at least one token")
        if max_tokens < 0:
            raise ValueError("max_tokens must be >= 0")
        sp = SkSampling(0.0 if greedy else temperature, top_k, top_p, min_p, repetition_penalty)
        if not (sp.temperature >= 0 and sp.top_k >= 0 and 0 < sp.top_p <= 1 and 0 <= sp.min_p <= 1
                and sp.repetition_penalty > 0):
            raise ValueError("need temperature >= 0, top_k >= 0, 0 < top_p <= 1, 0 <= min_p <= 1, repetition_penalty > 0")
        stop = set(self.eos_ids if stop is None else stop)
        self._h()
        return self._decode(ids, max_tokens, sp, seed, stop, kv_bf16)

    def _decode(self, ids, max_tokens, sp, seed, stop, kv_bf16):
        m, V, block = self._h(), self.vocab_size, self.block_size
        n = len(ids)
        start = n - block if n > block else 0
        ctx = min(n + max_tokens - start, block)
        kv = ctypes.c_void_p()
        kp = SkKvcacheParams(ctx, 1, _WEIGHTS[self.dtype], 1 if kv_bf16 else 0)
        check(lib.sk_kvcache_new_params(ctypes.byref(kv), m, ctypes.byref(kp)))
        try:
            logits = (ctypes.c_float * V)()
            p = (ctypes.c_int32 * (n - start))(*ids[start:])
            check(lib.sk_model_decode_seq(m, kv, 0, p, n - start, logits))
            rng = ctypes.c_uint64(seed)
            for i in range(max_tokens):
                hist = (ctypes.c_int32 * len(ids))(*ids)
                nxt = lib.sk_sample(logits, V, ctypes.byref(sp), hist, len(ids), ctypes.byref(rng))
                if nxt in stop:
                    return
                ids.append(nxt)
                yield nxt
                if i + 1 == max_tokens:
                    return
                if lib.sk_kvcache_seq_pos(kv, 0) == ctx:     # context full: keep the newest half
                    keep = block // 2
                    lib.sk_kvcache_seq_truncate(kv, 0, 0)
                    p = (ctypes.c_int32 * keep)(*ids[-keep:])
                    check(lib.sk_model_decode_seq(m, kv, 0, p, keep, logits))
                else:
                    one = (ctypes.c_int32 * 1)(nxt)
                    check(lib.sk_model_decode_seq(m, kv, 0, one, 1, logits))
        finally:
            lib.sk_kvcache_free(kv)

    def tokenizer(self):
        """The model's tokenizer, found as `skiplm sample` finds it without --tokenizer: the
        path the checkpoint records (metadata tokenizer_path or tokenizer), else the folder of
        the weights when it holds tokenizer.json, vocab.bpe or merges.txt. A new Tokenizer."""
        if self.path is None:
            raise SkiplmError("the model was not loaded from a file: give a tokenizer (Tokenizer.load)", 1)
        return Tokenizer.load(_tokenizer_of(self.path))

    def chat(self, messages, tokenizer=None, template=None, tools=None, max_tokens=256, **sampling):
        """The assistant's reply (text) to messages (a list of {"role", "content", ...} dicts),
        as `skiplm sample --chat --messages FILE` makes it: the model folder's chat template
        (Chat.load(self.path, template)) renders the conversation and the generation prompt,
        the reply stops at eos_ids and at the template's eos_token when that is one token, and
        special tokens are left out of the text. tokenizer: a Tokenizer, or None for the
        model's own (tokenizer()). Sampling options as generate()'s."""
        if tokenizer is None:
            with self.tokenizer() as tok:
                return self.chat(messages, tok, template, tools, max_tokens, **sampling)
        with Chat.load(self.path, template) as c:
            ids = tokenizer.encode(c.render(messages, tools))
            stop = set(self.eos_ids if sampling.get("stop") is None else sampling["stop"])
            eos = c.eos_token
            if eos and sampling.get("stop") is None:
                e = tokenizer.encode(eos)
                if len(e) == 1:
                    stop.add(e[0])
        sampling["stop"] = stop
        new = list(self.generate(ids, max_tokens, **sampling))
        return tokenizer.decode([t for t in new if not tokenizer.is_special(t)])


class Tokenizer:
    """A tokenizer the library loads (sk_tok_load): a character vocabulary (vocab.json), a
    Hugging Face tokenizer.json, or a folder with GPT-2's encoder.json + vocab.bpe,
    tokenizer.json, or vocab.json + merges.txt."""

    def __init__(self, handle):
        self._t = handle

    @classmethod
    def load(cls, path):
        h = ctypes.c_void_p()
        check(lib.sk_tok_load(ctypes.byref(h), _path(path)))
        return cls(h)

    def close(self):
        if self._t:
            lib.sk_tok_free(self._t)
            self._t = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _h(self):
        if not self._t:
            raise ValueError("the tokenizer is closed")
        return self._t

    @property
    def vocab_size(self):
        return lib.sk_tok_vocab_size(self._h())

    @property
    def eot(self):
        """The end-of-text id, or None."""
        e = lib.sk_tok_eot(self._h())
        return None if e < 0 else e

    @property
    def kind(self):
        """"gpt2", "hf" (tokenizer.json) or "char"."""
        return lib.sk_tok_kind(self._h()).decode()

    def encode(self, text):
        """Token ids (a list) of text (str, as UTF-8, or bytes)."""
        b = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids, n, cap = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t(), ctypes.c_size_t()
        try:
            check(lib.sk_tok_encode(self._h(), b, len(b), ctypes.byref(ids), ctypes.byref(n), ctypes.byref(cap)))
            return ids[:n.value]
        finally:
            libc.free(ids)

    def decode_bytes(self, ids):
        """The bytes of ids (a token may hold part of a UTF-8 character)."""
        arr, _ = _ids(list(ids))
        out, n = ctypes.c_void_p(), ctypes.c_size_t()
        try:
            check(lib.sk_tok_decode(self._h(), arr, len(arr), ctypes.byref(out), ctypes.byref(n)))
            return ctypes.string_at(out, n.value)
        finally:
            libc.free(out)

    def decode(self, ids):
        """The text of ids (invalid UTF-8 replaced by U+FFFD)."""
        return self.decode_bytes(ids).decode("utf-8", "replace")

    def is_special(self, token):
        """True for a special token (what decode(skip_special_tokens=True) leaves out)."""
        return bool(lib.sk_tok_is_special(self._h(), token))


class Chat:
    """A chat template (sk_chat_load): of model (a weights file or folder), template if given
    (a .jinja file or a tokenizer_config.json), else chat_template.jinja beside the weights,
    else tokenizer_config.json's chat_template there."""

    def __init__(self, handle):
        self._c = handle

    @classmethod
    def load(cls, model, template=None):
        h = ctypes.c_void_p()
        check(lib.sk_chat_load(ctypes.byref(h), _path(model), _path(template) if template is not None else None))
        return cls(h)

    def close(self):
        if self._c:
            lib.sk_chat_free(self._c)
            self._c = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _h(self):
        if not self._c:
            raise ValueError("the chat template is closed")
        return self._c

    @property
    def eos_token(self):
        """tokenizer_config.json's eos_token, or None."""
        e = lib.sk_chat_eos_token(self._h())
        return None if e is None else e.decode("utf-8", "replace")

    def render(self, messages, tools=None, add_generation_prompt=True):
        """The template's text of messages (dicts passed to the template as they are) and tools
        (a list of function schemas, or None), with the assistant's header after them when
        add_generation_prompt (sk_chat_render_json)."""
        out, n = ctypes.c_void_p(), ctypes.c_size_t()
        tj = None if tools is None else json.dumps(tools).encode()
        try:
            check(lib.sk_chat_render_json(self._h(), json.dumps(messages).encode(), tj, int(bool(add_generation_prompt)),
                                          ctypes.byref(out), ctypes.byref(n)))
            return ctypes.string_at(out, n.value).decode("utf-8", "replace")
        finally:
            libc.free(out)


from ._train import Trainer, make_config  # noqa: E402  (Trainer.model is a Model)
