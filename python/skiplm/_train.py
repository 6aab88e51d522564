"""Training from Python: a model config from keyword arguments, and Trainer over the library's
loader and trainer (sk_loader_open, sk_trainer_new, sk_trainer_step, sk_trainer_save)."""
import ctypes
import os

from ._lib import SkConfig, SkSafetensors, check, lib

_u64 = ctypes.c_uint64


class SkTrainCfg(ctypes.Structure):
    """sk_train_cfg of include/skiplm_train.h."""
    _fields_ = [
        ("steps", ctypes.c_int), ("B", ctypes.c_int), ("T", ctypes.c_int), ("accum", ctypes.c_int),
        ("lr", ctypes.c_float), ("min_lr", ctypes.c_float), ("warmup", ctypes.c_int), ("lr_decay_steps", ctypes.c_int),
        ("beta1", ctypes.c_float), ("beta2", ctypes.c_float), ("eps", ctypes.c_float), ("weight_decay", ctypes.c_float),
        ("grad_clip", ctypes.c_float), ("seed", _u64), ("shuffle", ctypes.c_int), ("skip_nonfinite", ctypes.c_int),
        ("eval_every", ctypes.c_int), ("eval_batches", ctypes.c_int), ("ckpt_every", ctypes.c_int),
        ("world_size", ctypes.c_int), ("zero", ctypes.c_int),
    ]


class SkLoaderCfg(ctypes.Structure):
    """sk_loader_cfg of include/skiplm_train.h."""
    _fields_ = [("B", ctypes.c_int), ("T", ctypes.c_int), ("seed", _u64), ("shuffle", ctypes.c_int),
                ("rank", ctypes.c_int), ("world_size", ctypes.c_int), ("vocab_size", ctypes.c_int)]


class SkStepInfo(ctypes.Structure):
    """sk_step_info of include/skiplm_train.h."""
    _fields_ = [("step", ctypes.c_int), ("loss", ctypes.c_float), ("lr", ctypes.c_double), ("grad_norm", ctypes.c_double),
                ("skipped", ctypes.c_int), ("tokens", _u64)]


_p, _pp, _int, _str = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_char_p
for _name, _res, _args in [
    ("sk_config_default", None, [ctypes.POINTER(SkConfig)]),
    ("sk_config_preset", _int, [ctypes.POINTER(SkConfig), _str]),
    ("sk_config_sla_default", None, [ctypes.POINTER(SkConfig)]),
    ("sk_config_set", _int, [ctypes.POINTER(SkConfig), _str, _str]),
    ("sk_config_check", _int, [ctypes.POINTER(SkConfig)]),
    ("sk_model_new", _int, [_pp, ctypes.POINTER(SkConfig), _u64]),
    ("sk_train_default", None, [ctypes.POINTER(SkTrainCfg)]),
    ("sk_loader_open", _int, [_pp, ctypes.POINTER(_str), _int, ctypes.POINTER(SkLoaderCfg)]),
    ("sk_loader_free", None, [_p]),
    ("sk_loader_n_windows", _u64, [_p]),
    ("sk_loader_next_xy", _int, [_p, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32)]),
    ("sk_trainer_new", _int, [_pp, _p, ctypes.POINTER(SkTrainCfg), _p, _p]),
    ("sk_trainer_free", None, [_p]),
    ("sk_trainer_step", _int, [_p, ctypes.POINTER(SkStepInfo)]),
    ("sk_trainer_eval", _int, [_p, ctypes.POINTER(ctypes.c_float)]),
    ("sk_trainer_save", _int, [_p, _str, ctypes.POINTER(_str)]),
    ("sk_trainer_step_count", _int, [_p]),
    ("sk_trainer_resume", _int, [_p, ctypes.POINTER(SkSafetensors), _str]),
]:
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args

_TRAIN_KEYS = {n for n, _ in SkTrainCfg._fields_} - {"world_size", "zero"}


def make_config(preset=None, sla=False, **fields):
    """An sk_config: the defaults (sk_config_default) or a preset ("nano", "small", "gpt2",
    ...), sla=True for the paper's 3/4 rule, then each field set by name as sk_config_set (and
    `skiplm --FIELD VALUE`) takes it; checked by sk_config_check (errors name the field)."""
    c = SkConfig()
    if preset:
        check(lib.sk_config_preset(ctypes.byref(c), preset.encode()))
    else:
        lib.sk_config_default(ctypes.byref(c))
    for k, v in fields.items():
        check(lib.sk_config_set(ctypes.byref(c), k.encode(), str(int(v) if isinstance(v, bool) else v).encode()))
    if sla:
        lib.sk_config_sla_default(ctypes.byref(c))
    check(lib.sk_config_check(ctypes.byref(c)))
    return c


def evaluate(model, shards, batch=8, seq=None, max_batches=0):
    """Model.eval: skiplm eval's mean loss over the windows of shards, in order."""
    import math
    c = lib.sk_model_config(model._h()).contents
    T = seq or c.block_size
    if not 1 <= T <= c.block_size or batch < 1 or max_batches < 0:
        raise ValueError(f"need 1 <= seq <= block_size {c.block_size}, batch >= 1, max_batches >= 0")
    paths = [shards] if isinstance(shards, (str, os.PathLike)) else list(shards)
    arr = (ctypes.c_char_p * len(paths))(*[os.fsencode(os.fspath(p)) for p in paths])
    lc = SkLoaderCfg(B=batch, T=T, vocab_size=c.vocab_size)
    L = ctypes.c_void_p()
    check(lib.sk_loader_open(ctypes.byref(L), arr, len(paths), ctypes.byref(lc)))
    try:
        nb = lib.sk_loader_n_windows(L) // batch
        if nb == 0:
            raise ValueError(f"the shards hold {lib.sk_loader_n_windows(L)} windows of {T + 1} tokens, fewer than one batch of {batch}")
        if 0 < max_batches < nb:
            nb = max_batches
        x, y = (ctypes.c_int32 * (batch * T))(), (ctypes.c_int32 * (batch * T))()
        loss = ctypes.c_float()
        total = n_all = 0.0
        for _ in range(nb):
            check(lib.sk_loader_next_xy(L, x, y))
            n = sum(1 for t in y if t >= 0)
            check(lib.sk_model_forward(model._h(), x, y, batch, T, ctypes.byref(loss), None))
            if n:
                total += loss.value * n
            n_all += n
    finally:
        lib.sk_loader_free(L)
    if n_all == 0:
        raise ValueError("every target of the batches is masked out (loss mask 0)")
    mean = total / n_all
    return {"loss": mean, "ppl": math.exp(mean), "tokens": nb * batch * T, "batches": nb}


class Trainer:
    """Training from scratch on token shards, with the library's trainer (docs/training.md):

        tr = skiplm.Trainer(dict(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=12),
                            "data/mine/train.bin", sla=True, steps=100, B=8, lr=3e-3)
        for _ in range(100):
            info = tr.step()          # {"step", "loss", "lr", "grad_norm", "skipped", "tokens"}
        tr.save("runs/py/ckpt.safetensors")
        # later: the same Trainer(...) call, then tr.resume("runs/py/ckpt.safetensors")

    config: a dict of config fields (as make_config takes them, "preset" and "sla" too); data:
    a shard path or a list of them; val: validation shards for eval(), or None. Keyword
    arguments set the sk_train_cfg fields (steps, B, T, accum, lr, min_lr, warmup,
    lr_decay_steps, beta1, beta2, eps, weight_decay, grad_clip, seed, shuffle, ...); as `skiplm
    train` does, T defaults to block_size and min_lr to lr / 10. The model is trainer.model (a
    Model; freed with the trainer)."""

    def __init__(self, config, data, val=None, sla=False, **train):
        from . import Model
        self._tr = self._L = self._V = None
        self.model = None
        config = dict(config)
        c = make_config(config.pop("preset", None), sla or config.pop("sla", False), **config)
        tc = SkTrainCfg()
        lib.sk_train_default(ctypes.byref(tc))
        unknown = set(train) - _TRAIN_KEYS
        if unknown:
            raise ValueError(f"unknown training options {sorted(unknown)}; known: {sorted(_TRAIN_KEYS)}")
        for k, v in train.items():
            setattr(tc, k, v)
        if "T" not in train:
            tc.T = c.block_size
        if "min_lr" not in train:
            tc.min_lr = tc.lr / 10
        self.cfg = tc
        try:
            self._L = self._open([data] if isinstance(data, (str, os.PathLike)) else list(data), tc, c.vocab_size)
            if val is not None:
                self._V = self._open([val] if isinstance(val, (str, os.PathLike)) else list(val), tc, c.vocab_size,
                                     shuffle=0)
            m = ctypes.c_void_p()
            check(lib.sk_model_new(ctypes.byref(m), ctypes.byref(c), tc.seed))
            self.model = Model(m, None, "f32")
            self.model.eos_ids = []
            tr = ctypes.c_void_p()
            check(lib.sk_trainer_new(ctypes.byref(tr), m, ctypes.byref(tc), self._L, self._V))
            self._tr = tr
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _open(paths, tc, vocab_size, shuffle=None):
        lc = SkLoaderCfg(B=tc.B, T=tc.T, seed=tc.seed, shuffle=tc.shuffle if shuffle is None else shuffle,
                         vocab_size=vocab_size)
        arr = (ctypes.c_char_p * len(paths))(*[os.fsencode(os.fspath(p)) for p in paths])
        L = ctypes.c_void_p()
        check(lib.sk_loader_open(ctypes.byref(L), arr, len(paths), ctypes.byref(lc)))
        return L

    def _h(self):
        if not self._tr:
            raise ValueError("the trainer is closed")
        return self._tr

    def step(self):
        """One optimizer step (sk_trainer_step): a dict with step, loss, lr, grad_norm,
        skipped and tokens."""
        info = SkStepInfo()
        check(lib.sk_trainer_step(self._h(), ctypes.byref(info)))
        return {n: getattr(info, n) for n, _ in SkStepInfo._fields_}

    @property
    def steps_done(self):
        return lib.sk_trainer_step_count(self._h())

    def eval(self):
        """Mean loss over eval_batches validation batches (needs val)."""
        loss = ctypes.c_float()
        check(lib.sk_trainer_eval(self._h(), ctypes.byref(loss)))
        return loss.value

    def save(self, path, meta=None):
        """A checkpoint (sk_trainer_save): the model, AdamW's m and v and the training state,
        which skiplm eval and sample read; meta: extra
        string metadata (a dict)."""
        kv = [os.fsencode(str(x)) for k, v in (meta or {}).items() for x in (k, v)] + [None]
        arr = (ctypes.c_char_p * len(kv))(*kv)
        check(lib.sk_trainer_save(self._h(), os.fsencode(os.fspath(path)), arr))

    def resume(self, path):
        """Continue from a checkpoint (a file or a run folder holding ckpt.safetensors) that
        Trainer.save or `skiplm train` wrote (sk_trainer_resume): the parameters, AdamW's m
        and v, the step counters and the data loader's position come back bit for bit, so
        N steps, save, resume and M more steps give the checkpoint of N + M steps in one go
        (and of `skiplm train --resume`). The trainer must be built as the checkpoint's run
        was (the same config and training options, eval_every, eval_batches and ckpt_every
        aside): SkiplmError names the first field that differs. Returns the step reached."""
        p = os.fspath(path)
        if os.path.isdir(p):
            p = os.path.join(p, "ckpt.safetensors")
        st = SkSafetensors()
        check(lib.sk_st_read(os.fsencode(p), ctypes.byref(st)))
        try:
            check(lib.sk_trainer_resume(self._h(), ctypes.byref(st), os.fsencode(p)))
        finally:
            lib.sk_st_free(ctypes.byref(st))
        return self.steps_done

    def close(self):
        """Free the trainer, its loaders and its model."""
        if self._tr:
            lib.sk_trainer_free(self._tr)
            self._tr = None
        if self.model is not None:
            self.model.close()
        for name in ("_L", "_V"):
            if getattr(self, name):
                lib.sk_loader_free(getattr(self, name))
                setattr(self, name, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
