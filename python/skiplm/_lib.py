"""The shared library libskiplm.so through ctypes: where it is found, the C types the package
uses, and the error check that turns a failing call into SkiplmError with sk_last_error()."""
import ctypes
import ctypes.util
import os

__all__ = ["lib", "libc", "SkiplmError", "check", "SkConfig", "SkSampling", "lib_path"]


class SkiplmError(Exception):
    """A failing library call: str(e) is the library's message (sk_last_error), e.code its
    error code (1 bad argument, 2 I/O, 3 file format, 4 memory, 5 non-finite number)."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


SkiplmError.__module__ = "skiplm"


def _candidates():
    env = os.environ.get("SKIPLM_LIB")
    if env:   # a file, or a folder holding libskiplm.so
        return [os.path.join(env, "libskiplm.so") if os.path.isdir(env) else env]
    here = os.path.dirname(os.path.abspath(__file__))
    repo_build = os.path.join(os.path.dirname(os.path.dirname(here)), "build", "libskiplm.so")
    found = ctypes.util.find_library("skiplm")
    return [p for p in (repo_build, found or "libskiplm.so.0") if p]


def _load():
    tried = []
    for p in _candidates():
        if os.sep in p and not os.path.exists(p):
            tried.append(p + " (no such file)")
            continue
        try:
            return ctypes.CDLL(p), p
        except OSError as e:
            tried.append(f"{p} ({e})")
    raise ImportError("skiplm: cannot load libskiplm.so: tried " + "; ".join(tried) +
                      ". Build it with `make` in the repository (build/libskiplm.so), install it with "
                      "`make install`, or point SKIPLM_LIB at the file or its folder")


lib, lib_path = _load()
libc = ctypes.CDLL(None)          # free() for the buffers the library mallocs
libc.free.argtypes = [ctypes.c_void_p]
libc.free.restype = None


class SkConfig(ctypes.Structure):
    """sk_config of include/skiplm_model.h, field for field (read only through a pointer)."""
    _fields_ = [
        ("family", ctypes.c_int), ("n_layer", ctypes.c_int), ("n_head", ctypes.c_int), ("n_kv_head", ctypes.c_int),
        ("n_embd", ctypes.c_int), ("block_size", ctypes.c_int), ("vocab_size", ctypes.c_int),
        ("padded_vocab_size", ctypes.c_int), ("bias", ctypes.c_int), ("dropout", ctypes.c_float),
        ("gelu", ctypes.c_int), ("n_skip_layer", ctypes.c_int), ("n_skip_head", ctypes.c_int),
        ("norm_eps", ctypes.c_float), ("sinusoidal", ctypes.c_int), ("relu", ctypes.c_int),
        ("untied_head", ctypes.c_int), ("routing", ctypes.c_char * 200), ("rope_theta", ctypes.c_float),
        ("ffn_hidden", ctypes.c_int), ("qkv_bias", ctypes.c_int), ("rope_scaling", ctypes.c_int),
        ("rope_factor", ctypes.c_float), ("rope_low_freq_factor", ctypes.c_float),
        ("rope_high_freq_factor", ctypes.c_float), ("rope_original_ctx", ctypes.c_int),
    ]


class SkSampling(ctypes.Structure):
    """sk_sampling of include/skiplm_model.h."""
    _fields_ = [("temperature", ctypes.c_float), ("top_k", ctypes.c_int), ("top_p", ctypes.c_float),
                ("min_p", ctypes.c_float), ("repetition_penalty", ctypes.c_float)]


class SkKvcacheParams(ctypes.Structure):
    """sk_kvcache_params of include/skiplm_model.h (the enums are C ints)."""
    _fields_ = [("max_T", ctypes.c_int), ("n_seq", ctypes.c_int), ("weights", ctypes.c_int), ("kv_type", ctypes.c_int)]


class SkSafetensors(ctypes.Structure):
    """sk_safetensors of include/skiplm_io.h (filled by sk_st_read, freed by sk_st_free)."""
    _fields_ = [("tensors", ctypes.c_void_p), ("n_tensors", ctypes.c_int), ("meta_keys", ctypes.c_void_p),
                ("meta_vals", ctypes.c_void_p), ("n_meta", ctypes.c_int), ("data", ctypes.c_void_p),
                ("data_size", ctypes.c_size_t), ("path", ctypes.c_char_p)]


_p = ctypes.c_void_p
_pp = ctypes.POINTER(ctypes.c_void_p)
_i32p = ctypes.POINTER(ctypes.c_int32)
_f32p = ctypes.POINTER(ctypes.c_float)
_sz = ctypes.c_size_t
_int = ctypes.c_int
_str = ctypes.c_char_p

# name: (restype, argtypes), as declared in include/*.h
_PROTOS = {
    "sk_last_error": (_str, []),
    "sk_device_check": (_int, [_str]),
    "sk_weights_file": (ctypes.c_void_p, [_str]),
    "sk_st_read": (_int, [_str, ctypes.POINTER(SkSafetensors)]),
    "sk_st_free": (None, [ctypes.POINTER(SkSafetensors)]),
    "sk_st_meta": (_str, [ctypes.POINTER(SkSafetensors), _str]),
    "sk_model_load": (_int, [_pp, _str, _p]),
    "sk_model_free": (None, [_p]),
    "sk_model_config": (ctypes.POINTER(SkConfig), [_p]),
    "sk_model_num_params": (_sz, [_p]),
    "sk_model_quantize_q8": (_int, [_p]),
    "sk_model_q8": (_int, [_p]),
    "sk_model_forward": (_int, [_p, _i32p, _i32p, _int, _int, _f32p, _f32p]),
    "sk_hf_eos_ids": (_int, [_str, _i32p, _int, ctypes.POINTER(_int)]),
    "sk_kvcache_new_params": (_int, [_pp, _p, ctypes.POINTER(SkKvcacheParams)]),
    "sk_kvcache_free": (None, [_p]),
    "sk_kvcache_seq_pos": (_int, [_p, _int]),
    "sk_kvcache_seq_truncate": (None, [_p, _int, _int]),
    "sk_model_decode_seq": (_int, [_p, _p, _int, _i32p, _int, _f32p]),
    "sk_sample": (_int, [_f32p, _int, ctypes.POINTER(SkSampling), _i32p, _sz, ctypes.POINTER(ctypes.c_uint64)]),
    "sk_tok_load": (_int, [_pp, _str]),
    "sk_tok_free": (None, [_p]),
    "sk_tok_vocab_size": (_int, [_p]),
    "sk_tok_eot": (_int, [_p]),
    "sk_tok_kind": (_str, [_p]),
    "sk_tok_encode": (_int, [_p, _str, _sz, ctypes.POINTER(_i32p), ctypes.POINTER(_sz), ctypes.POINTER(_sz)]),
    "sk_tok_decode": (_int, [_p, _i32p, _sz, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(_sz)]),
    "sk_tok_is_special": (_int, [_p, ctypes.c_int32]),
    "sk_chat_load": (_int, [_pp, _str, _str]),
    "sk_chat_free": (None, [_p]),
    "sk_chat_eos_token": (_str, [_p]),
    "sk_chat_render_json": (_int, [_p, _str, _str, _int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(_sz)]),
}
for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args


def check(rc):
    """Raise SkiplmError with the library's message when a call returned non-zero."""
    if rc != 0:
        raise SkiplmError(lib.sk_last_error().decode("utf-8", "replace"), rc)
