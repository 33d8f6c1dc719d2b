#!/usr/bin/python3
"""Writes a GGUF v3 file from a Hugging Face llama / qwen2 / qwen3 / phi3 / gemma / gemma2 checkpoint folder the way llama.cpp's
convert_hf_to_gguf.py does for `--outtype f32` (or `--outtype f16`): an independent oracle for
`cortiq convert model.gguf`, used by tests/convert_e2e_test.cc on checkpoints written by
gen_checkpoint.py (config.json + model.safetensors, or sharded with model.safetensors.index.json).

Only the standard library and numpy are used; the file is written by hand:
  "GGUF", u32 version 3, u64 tensor count, u64 metadata count,
  metadata (u64-length key, u32 type, value), tensor infos (name, u32 n_dims, u64 ne[n_dims]
  (the HF shape reversed), u32 ggml type, u64 offset into the data), padding to 32
  (general.alignment is not written, so the default 32 applies), tensor data each aligned to 32.

Metadata: general.architecture, general.name, general.file_type, {arch}.context_length,
embedding_length, block_count, feed_forward_length, attention.head_count, attention.head_count_kv,
attention.layer_norm_rms_epsilon (f32), rope.freq_base (f32), {arch}.attention.key_length /
value_length when config.json has head_dim, and for llama {arch}.vocab_size and
rope.dimension_count (LlamaModel.set_gguf_parameters); tokenizer.ggml.bos/eos_token_id when
config.json has them. No tokenizer.ggml.model / tokens (the converter then writes no vocab).

Tensors: token_embd, output_norm, output (only when the checkpoint has lm_head.weight),
blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}.weight
and blk.N.attn_{q,k,v}.bias, qwen3's blk.N.attn_{q,k}_norm.weight, phi3's fused blk.N.attn_qkv and
ffn_up (gate and up) with rope.dimension_count, rope.scaling.original_context_length and
attention.sliding_window (Phi3MiniModel); for a llama config with rope_scaling.rope_type "llama3", first
rope_freqs.weight (f32, one factor per rotary pair, as LlamaModel.generate_extra_tensors); for
rope_scaling of type linear or yarn, {arch}.rope.scaling.type / factor (and for yarn
original_context_length), as TextModel.set_gguf_parameters. For llama the Q rows (and bias) are permuted per head with n_head and
the K rows with n_head_kv, as LlamaModel.permute does: head rows viewed as [2, hd/2] and
transposed to [hd/2, 2] (HF's rotate-half pairs (j, j + hd/2) become adjacent rows 2j, 2j+1).
qwen2 and qwen3 are not permuted (Qwen2Model, Qwen3Model). gemma and gemma2 (GemmaModel, Gemma2Model):
no rope.freq_base, key_length / value_length from head_dim, every `*norm.weight` written as 1 + w,
lm_head.weight dropped; gemma2 adds attn_logit_softcapping, final_logit_softcapping (f32) and
attention.sliding_window, and its sandwich norms are post_attention_norm / ffn_norm (the pre-FFN
norm) / post_ffw_norm. With --outtype f16 the 2-D weights are f16 and the 1-D tensors stay f32,
as in llama.cpp.

--debug-permute none|k-with-n-head breaks the llama permutation on purpose (tests prove that
the comparison would catch a converter that skipped the permutation or used n_head for K);
--debug-rope-freqs short|zero writes a rope_freqs tensor one value short, or with a 0 factor.

Example:
  hf_to_gguf.py /tmp/llama_ckpt /tmp/llama.gguf [--outtype f16]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

# GGUF metadata value types
T_UINT32, T_FLOAT32, T_STRING = 4, 6, 8
# ggml tensor types
GGML_F32, GGML_F16 = 0, 1
ALIGN = 32

LAYER_NAMES = [  # HF suffix (after model.layers.N.) -> GGUF suffix (after blk.N.)
    ("input_layernorm", "attn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("post_attention_layernorm", "ffn_norm"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
    ("self_attn.q_norm", "attn_q_norm"),  # qwen3
    ("self_attn.k_norm", "attn_k_norm"),
    ("self_attn.qkv_proj", "attn_qkv"),  # phi3: fused, written unsplit
    ("mlp.gate_up_proj", "ffn_up"),
]


def read_safetensors(path):
    """[(name, float32 array of its shape)] in the file's data order."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    dt = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}
    out = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        if info["dtype"] not in dt:
            sys.exit(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        x = np.frombuffer(blob, dtype=dt[info["dtype"]], count=(e - b) // np.dtype(dt[info["dtype"]]).itemsize,
                          offset=base + b)
        if info["dtype"] == "BF16":
            x = (x.astype(np.uint32) << 16).view(np.float32)
        out.append((b, name, x.astype(np.float32).reshape(info["shape"])))
    out.sort(key=lambda t: t[0])
    return [(name, x) for _, name, x in out]


def read_checkpoint(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    ts = []
    for fn in files:
        ts += read_safetensors(os.path.join(d, fn))
    return ts


def permute(w, n_head, n_head_kv):
    """llama.cpp's LlamaModel.permute: per head, rows [2, hd/2] -> [hd/2, 2]."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    rows = w.shape[0]
    hd = rows // n_head
    return w.reshape(n_head, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(c):
    """llama.cpp's LlamaModel.generate_extra_tensors for rope_scaling.rope_type == "llama3": one
    factor per rotary pair, computed in float32 as there (freqs from torch.arange in float32). As
    there, original_max_position_embeddings is read from the top level of config.json (default
    8192), not from rope_scaling."""
    rs = c["rope_scaling"]
    base = c.get("rope_theta", 10000.0)
    dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    freqs = np.float32(1.0) / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    factor = rs.get("factor", 8.0)
    low, high = rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    old = c.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for freq in freqs:
        wavelen = np.float32(2 * np.pi) / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (np.float32(old) / wavelen - np.float32(low)) / np.float32(high - low)
            out.append(np.float32(1) / ((np.float32(1) - smooth) / np.float32(factor) + smooth))
    return np.array(out, dtype=np.float32)


GEMMA2_NORMS = [  # Gemma2Model: the sandwich norms (gguf-py ATTN_POST_NORM, FFN_PRE_NORM, FFN_POST_NORM)
    ("post_attention_layernorm", "post_attention_norm"),
    ("pre_feedforward_layernorm", "ffn_norm"),
    ("post_feedforward_layernorm", "post_ffw_norm"),
]


def gguf_name(hf, arch=""):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    if hf.startswith("model.layers."):
        rest = hf[len("model.layers."):]
        layer, tail = rest.split(".", 1)
        for h, g in (GEMMA2_NORMS if arch == "gemma2" else []) + LAYER_NAMES:
            for suffix in (".weight", ".bias"):
                if tail == h + suffix:
                    return f"blk.{int(layer)}.{g}{suffix}"
    sys.exit(f"tensor {hf} has no GGUF name here")


class Writer:
    def __init__(self):
        self.kv = []

    @staticmethod
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    def add(self, key, typ, value):
        if typ == T_UINT32:
            v = struct.pack("<I", int(value))
        elif typ == T_FLOAT32:
            v = struct.pack("<f", float(value))
        elif typ == T_STRING:
            v = self.s(value)
        else:
            raise ValueError(typ)
        self.kv.append(self.s(key) + struct.pack("<I", typ) + v)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=["f32", "f16"], default="f32")
    ap.add_argument("--name", default="")
    ap.add_argument("--debug-permute", choices=["normal", "none", "k-with-n-head"], default="normal")
    ap.add_argument("--debug-rope-freqs", choices=["normal", "short", "zero"], default="normal",
                    help="write a broken rope_freqs tensor (one value short, or a 0 factor)")
    a = ap.parse_args()

    with open(os.path.join(a.model_dir, "config.json")) as f:
        c = json.load(f)
    arch = c.get("model_type")
    if arch not in ("llama", "qwen2", "qwen3", "phi3", "gemma", "gemma2"):
        sys.exit(f"model_type {arch!r}: only llama, qwen2, qwen3, phi3, gemma and gemma2 are written")
    gemma = arch in ("gemma", "gemma2")
    n_head = c["num_attention_heads"]
    n_kv = c.get("num_key_value_heads", n_head)

    w = Writer()
    w.add("general.architecture", T_STRING, arch)
    w.add("general.name", T_STRING, a.name or os.path.basename(os.path.normpath(a.model_dir)))
    w.add(f"{arch}.context_length", T_UINT32, c["max_position_embeddings"])
    w.add(f"{arch}.embedding_length", T_UINT32, c["hidden_size"])
    w.add(f"{arch}.block_count", T_UINT32, c["num_hidden_layers"])
    w.add(f"{arch}.feed_forward_length", T_UINT32, c["intermediate_size"])
    w.add(f"{arch}.attention.head_count", T_UINT32, n_head)
    w.add(f"{arch}.attention.head_count_kv", T_UINT32, n_kv)
    if not gemma:  # GemmaModel / Gemma2Model write no rope.freq_base (llama.cpp's default 10000)
        w.add(f"{arch}.rope.freq_base", T_FLOAT32, c.get("rope_theta", 10000.0))
    w.add(f"{arch}.attention.layer_norm_rms_epsilon", T_FLOAT32, c["rms_norm_eps"])
    if gemma:  # they read head_dim unconditionally
        w.add(f"{arch}.attention.key_length", T_UINT32, c["head_dim"])
        w.add(f"{arch}.attention.value_length", T_UINT32, c["head_dim"])
    if arch == "gemma2":  # Gemma2Model.set_gguf_parameters
        w.add(f"{arch}.attn_logit_softcapping", T_FLOAT32, c["attn_logit_softcapping"])
        w.add(f"{arch}.final_logit_softcapping", T_FLOAT32, c["final_logit_softcapping"])
        w.add(f"{arch}.attention.sliding_window", T_UINT32, c["sliding_window"])
    if c.get("head_dim") is not None and arch != "phi3" and not gemma:  # Phi3MiniModel writes no key_length
        w.add(f"{arch}.attention.key_length", T_UINT32, c["head_dim"])
        w.add(f"{arch}.attention.value_length", T_UINT32, c["head_dim"])
    if arch == "phi3":  # Phi3MiniModel.set_gguf_parameters
        rot_pct = c.get("partial_rotary_factor", 1.0)
        w.add(f"{arch}.rope.dimension_count", T_UINT32, int(rot_pct * c["hidden_size"]) // n_head)
        w.add(f"{arch}.rope.scaling.original_context_length", T_UINT32,
              c.get("original_max_position_embeddings", c["max_position_embeddings"]))
        w.add(f"{arch}.attention.sliding_window", T_UINT32, c.get("sliding_window") or 0)
    w.add("general.file_type", T_UINT32, 0 if a.outtype == "f32" else 1)
    if arch == "llama":
        w.add(f"{arch}.vocab_size", T_UINT32, c["vocab_size"])
        w.add(f"{arch}.rope.dimension_count", T_UINT32, c.get("head_dim") or c["hidden_size"] // n_head)
    for k in ("bos_token_id", "eos_token_id"):
        if isinstance(c.get(k), int):
            w.add(f"tokenizer.ggml.{k}", T_UINT32, c[k])
    # linear and yarn RoPE scaling as TextModel.set_gguf_parameters writes them
    rs = c.get("rope_scaling") or {}
    rope_type = str(rs.get("rope_type", rs.get("type", ""))).lower()
    if rope_type in ("linear", "yarn") and "factor" in rs:
        w.add(f"{arch}.rope.scaling.type", T_STRING, rope_type)
        w.add(f"{arch}.rope.scaling.factor", T_FLOAT32, rs["factor"])
        if rope_type == "yarn":
            w.add(f"{arch}.rope.scaling.original_context_length", T_UINT32,
                  rs["original_max_position_embeddings"])

    tensors = []
    rs = c.get("rope_scaling") or {}
    if arch == "llama" and str(rs.get("rope_type", rs.get("type", ""))).lower() == "llama3":
        # generate_extra_tensors comes first in llama.cpp's tensor order
        f = llama3_rope_factors(c)
        if a.debug_rope_freqs == "short":
            f = f[:-1]
        elif a.debug_rope_freqs == "zero":
            f[0] = 0.0
        tensors.append(("rope_freqs.weight", [f.size], GGML_F32, f.astype("<f4").tobytes()))
    for hf, x in read_checkpoint(a.model_dir):
        if gemma and hf == "lm_head.weight":  # GemmaModel.modify_tensors: llama.cpp's output is token_embd
            continue
        if gemma and hf.endswith("norm.weight"):  # HF's Gemma norm is x̂·(1 + w); llama.cpp's is x̂·g
            x = x + np.float32(1)
        if arch == "llama" and a.debug_permute != "none":
            if hf.endswith(("q_proj.weight", "q_proj.bias")):
                x = permute(x, n_head, n_head)
            if hf.endswith(("k_proj.weight", "k_proj.bias")):
                x = permute(x, n_head, n_head if a.debug_permute == "k-with-n-head" else n_kv)
        if a.outtype == "f16" and x.ndim >= 2:
            data, gt = np.ascontiguousarray(x, dtype="<f2").tobytes(), GGML_F16
        else:
            data, gt = np.ascontiguousarray(x, dtype="<f4").tobytes(), GGML_F32
        tensors.append((gguf_name(hf, arch), list(reversed(x.shape)), gt, data))

    infos, off = [], 0
    for name, ne, gt, data in tensors:
        infos.append(Writer.s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) +
                     struct.pack("<IQ", gt, off))
        off += (len(data) + ALIGN - 1) // ALIGN * ALIGN
    with open(a.out, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(w.kv)))
        for kv in w.kv:
            f.write(kv)
        for i in infos:
            f.write(i)
        f.write(b"\0" * ((ALIGN - f.tell() % ALIGN) % ALIGN))
        for _, _, _, data in tensors:
            f.write(data)
            f.write(b"\0" * ((ALIGN - len(data) % ALIGN) % ALIGN))


if __name__ == "__main__":
    main()
