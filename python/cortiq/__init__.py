"""Python binding of the Cortiq C API (include/cortiq.h) with ctypes: no build step.

The shared library is found through $CORTIQ_LIBRARY (a path to libcortiq.so), else the system's
library search (ctypes.util.find_library / "libcortiq.so").

    import cortiq
    m = cortiq.Model("model.cmf")
    for piece in m.generate("Once upon a time", max_tokens=64):
        print(piece, end="", flush=True)
"""

import ctypes
import ctypes.util
import os

__all__ = ["Model", "CortiqError", "library"]

_lib = None


class CortiqError(RuntimeError):
    """A failed call: `code` is the C status (cortiq_status), the message is cortiq_last_error()."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class _ModelParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("threads", ctypes.c_size_t), ("ctx", ctypes.c_size_t),
                ("n_parallel", ctypes.c_size_t), ("kv_f16", ctypes.c_int), ("exact", ctypes.c_int),
                ("check_tensors", ctypes.c_int)]


class _SamplerParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("temperature", ctypes.c_float), ("top_p", ctypes.c_float),
                ("top_k", ctypes.c_int32), ("min_p", ctypes.c_float), ("repeat_penalty", ctypes.c_float),
                ("presence_penalty", ctypes.c_float), ("seed", ctypes.c_int64), ("max_tokens", ctypes.c_size_t),
                ("stop", ctypes.POINTER(ctypes.c_char_p)), ("n_stop", ctypes.c_size_t)]


class _ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class _GenerateResult(ctypes.Structure):
    _fields_ = [("finish", ctypes.c_int), ("prompt_tokens", ctypes.c_size_t), ("reused_tokens", ctypes.c_size_t),
                ("generated_tokens", ctypes.c_size_t)]


FINISH = {0: "none", 1: "stop", 2: "max_tokens", 3: "length", 4: "cancelled"}
_TOKENIZE = {"plain": 0, "special": 1, "prompt": 2}


def library():
    """The loaded libcortiq (ctypes.CDLL), loaded on first use."""
    global _lib
    if _lib is not None:
        return _lib
    path = os.environ.get("CORTIQ_LIBRARY") or ctypes.util.find_library("cortiq") or "libcortiq.so"
    lib = ctypes.CDLL(path)
    P, S, I, F, D = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_float, ctypes.c_double
    CP, I32P = ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32)
    sig = {
        "cortiq_last_error": (CP, []),
        "cortiq_version": (CP, []),
        "cortiq_string_free": (None, [P]),
        "cortiq_model_params_default": (_ModelParams, []),
        "cortiq_model_open": (I, [CP, ctypes.POINTER(_ModelParams), ctypes.POINTER(P)]),
        "cortiq_model_close": (None, [P]),
        "cortiq_model_n_vocab": (S, [P]),
        "cortiq_model_n_embd": (S, [P]),
        "cortiq_model_n_ctx": (S, [P]),
        "cortiq_tokenize": (I, [P, CP, S, I, I32P, S, ctypes.POINTER(S)]),
        "cortiq_detokenize": (I, [P, I32P, S, I, ctypes.POINTER(P), ctypes.POINTER(S)]),
        "cortiq_chat_render": (I, [P, ctypes.POINTER(_ChatMessage), S, I, ctypes.POINTER(P)]),
        "cortiq_context_new": (I, [P, ctypes.POINTER(P)]),
        "cortiq_context_free": (None, [P]),
        "cortiq_context_set_task": (I, [P, CP]),
        "cortiq_context_set_skill": (I, [P, CP]),
        "cortiq_sampler_params_default": (_SamplerParams, []),
        "cortiq_stream_begin": (I, [P, I32P, S, ctypes.POINTER(_SamplerParams), ctypes.POINTER(P)]),
        "cortiq_stream_next": (I, [P, ctypes.POINTER(P), ctypes.POINTER(S)]),
        "cortiq_stream_cancel": (None, [P]),
        "cortiq_stream_free": (I, [P, ctypes.POINTER(_GenerateResult)]),
        "cortiq_logits": (I, [P, I32P, S, I, ctypes.POINTER(F), S]),
        "cortiq_embed": (I, [P, I32P, S, I, ctypes.POINTER(F), S]),
        "cortiq_embed_ex": (I, [P, I32P, S, I, I, ctypes.POINTER(F), S]),
        "cortiq_perplexity": (I, [P, CP, S, ctypes.POINTER(D), ctypes.POINTER(S)]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    _lib = lib
    return lib


def _check(rc):
    if rc < 0:
        raise CortiqError(rc, library().cortiq_last_error().decode("utf-8", "replace"))
    return rc


def _take_string(ptr, length=None):
    """Copies a library-allocated string into a Python str and frees it."""
    try:
        raw = ctypes.string_at(ptr, length) if length is not None else ctypes.string_at(ptr)
        return raw.decode("utf-8")
    finally:
        library().cortiq_string_free(ptr)


def _ids(tokens):
    arr = (ctypes.c_int32 * len(tokens))(*tokens)
    return arr, len(tokens)


class Model:
    """A loaded .cmf model with one context (its own task mask and skill).

    Model(path, threads=0, ctx=0, task=None, skill=None): threads 0 = all cores; ctx 0 = the model's
    default context; task: a task-mask name or "off"; skill: a skill id. Close with close() or `with`.
    """

    def __init__(self, path, threads=0, ctx=0, task=None, skill=None, kv_f16=False, exact=False):
        lib = library()
        p = lib.cortiq_model_params_default()
        p.threads, p.ctx, p.kv_f16, p.exact = threads, ctx, int(kv_f16), int(exact)
        self._m = ctypes.c_void_p()
        self._c = ctypes.c_void_p()
        _check(lib.cortiq_model_open(os.fsencode(path), ctypes.byref(p), ctypes.byref(self._m)))
        _check(lib.cortiq_context_new(self._m, ctypes.byref(self._c)))
        if task is not None:
            _check(lib.cortiq_context_set_task(self._c, task.encode()))
        if skill is not None:
            _check(lib.cortiq_context_set_skill(self._c, skill.encode()))

    def close(self):
        if self._c:
            library().cortiq_context_free(self._c)
            self._c = ctypes.c_void_p()
        if self._m:
            library().cortiq_model_close(self._m)
            self._m = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def n_vocab(self):
        return library().cortiq_model_n_vocab(self._m)

    @property
    def n_ctx(self):
        return library().cortiq_model_n_ctx(self._m)

    def tokenize(self, text, mode="special"):
        """Token ids of `text`. mode: "special" (HF add_special_tokens=True, as `cortiq tokenize`),
        "plain" (the text's tokens alone) or "prompt" (as `cortiq run -p` encodes a raw prompt)."""
        lib = library()
        data = text.encode("utf-8")
        n = ctypes.c_size_t(0)
        cap = len(data) + 8
        while True:
            buf = (ctypes.c_int32 * cap)()
            rc = lib.cortiq_tokenize(self._m, data, len(data), _TOKENIZE[mode], buf, cap, ctypes.byref(n))
            if rc == -7 and n.value > cap:  # CORTIQ_ERR_BUFFER
                cap = n.value
                continue
            _check(rc)
            return list(buf[: n.value])

    def detokenize(self, ids, skip_special=True):
        arr, n = _ids(ids)
        out, length = ctypes.c_void_p(), ctypes.c_size_t(0)
        _check(library().cortiq_detokenize(self._m, arr, n, int(skip_special), ctypes.byref(out), ctypes.byref(length)))
        return _take_string(out, length.value)

    def render_chat(self, messages, no_think=False):
        """The prompt the model's chat template renders for `messages` ([{"role", "content"}])."""
        keep = [(m["role"].encode("utf-8"), m["content"].encode("utf-8")) for m in messages]
        arr = (_ChatMessage * len(keep))(*[_ChatMessage(r, c) for r, c in keep])
        out = ctypes.c_void_p()
        _check(library().cortiq_chat_render(self._m, arr, len(keep), int(no_think), ctypes.byref(out)))
        return _take_string(out)

    def generate(self, prompt, max_tokens=256, temperature=0.7, top_p=0.9, top_k=40, min_p=0.05,
                 repeat_penalty=1.0, presence_penalty=0.0, seed=-1, stop=(), greedy=False):
        """Streams the continuation of `prompt` (a str, encoded as `cortiq run --raw` does, or a
        list of ids) as text pieces. Leaving the loop early cancels the generation. After the
        loop, `self.last_finish` says why it ended ("stop", "max_tokens", "length", "cancelled")."""
        lib = library()
        ids = self.tokenize(prompt, "prompt") if isinstance(prompt, str) else list(prompt)
        p = lib.cortiq_sampler_params_default()
        p.max_tokens, p.top_p, p.top_k, p.min_p, p.seed = max_tokens, top_p, top_k, min_p, seed
        p.temperature = 0.0 if greedy else temperature
        p.repeat_penalty = 1.0 if greedy else repeat_penalty
        p.presence_penalty = 0.0 if greedy else presence_penalty
        stops = [s.encode("utf-8") for s in stop]
        stop_arr = (ctypes.c_char_p * max(1, len(stops)))(*stops)
        p.stop, p.n_stop = stop_arr, len(stops)
        return self._pieces(ids, p, stop_arr)

    def _pieces(self, ids, params, stop_arr):
        # Started on the first next(): a generator never iterated holds no stream (and so does not
        # keep the context busy).
        lib = library()
        arr, n = _ids(ids)
        stream = ctypes.c_void_p()
        _check(lib.cortiq_stream_begin(self._c, arr, n, ctypes.byref(params), ctypes.byref(stream)))
        del stop_arr  # copied by cortiq_stream_begin
        result = _GenerateResult()
        piece, length = ctypes.c_void_p(), ctypes.c_size_t(0)
        try:
            while True:
                rc = _check(lib.cortiq_stream_next(stream, ctypes.byref(piece), ctypes.byref(length)))
                if rc == 0:
                    break
                yield ctypes.string_at(piece, length.value).decode("utf-8")
        finally:
            rc = lib.cortiq_stream_free(stream, ctypes.byref(result))  # cancels when left early
            self.last_finish = FINISH.get(result.finish, "none")
            self.last_generated_tokens = result.generated_tokens
        _check(rc)

    def chat(self, messages, no_think=False, **kw):
        """Streams the model's answer to `messages` ([{"role": ..., "content": ...}]), rendered with
        its chat template; keyword arguments as generate()."""
        ids = self.tokenize(self.render_chat(messages, no_think), "plain")
        return self.generate(ids, **kw)

    def logits(self, prompt, all_positions=False):
        """Logits of a prompt (str or ids): the last position's [n_vocab] list, or every position's
        [n][n_vocab] with all_positions."""
        ids = self.tokenize(prompt, "prompt") if isinstance(prompt, str) else list(prompt)
        V = self.n_vocab
        rows = len(ids) if all_positions else 1
        out = (ctypes.c_float * (rows * V))()
        arr, n = _ids(ids)
        _check(library().cortiq_logits(self._c, arr, n, int(all_positions), out, rows * V))
        flat = list(out)
        return [flat[r * V:(r + 1) * V] for r in range(rows)] if all_positions else flat

    def embed(self, prompt, pooling="mean", normalize=True):
        """The final hidden state after the final norm (HF's last_hidden_state) of a prompt,
        mean-pooled or the last position's ("last"), L2-normalized unless normalize=False: a list
        of n_embd floats (what `cortiq serve` returns from /v1/embeddings)."""
        if pooling not in ("mean", "last"):
            raise ValueError("pooling must be 'mean' or 'last'")
        lib = library()
        ids = self.tokenize(prompt, "prompt") if isinstance(prompt, str) else list(prompt)
        d = lib.cortiq_model_n_embd(self._m)
        out = (ctypes.c_float * d)()
        arr, n = _ids(ids)
        _check(lib.cortiq_embed_ex(self._c, arr, n, 0 if pooling == "mean" else 1, int(bool(normalize)), out, d))
        return list(out)

    def ppl(self, text):
        """Perplexity of `text` (`cortiq ppl --mode prefix`: one sequence, up to the context)."""
        data = text.encode("utf-8")
        v, scored = ctypes.c_double(0.0), ctypes.c_size_t(0)
        _check(library().cortiq_perplexity(self._c, data, len(data), ctypes.byref(v), ctypes.byref(scored)))
        return v.value
