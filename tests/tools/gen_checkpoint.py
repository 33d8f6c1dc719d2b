#!/usr/bin/python3
"""Writes a random-weight Hugging Face checkpoint (config.json, generation_config.json,
safetensors, optionally a real tokenizer) for the families `cortiq convert` supports.

Only the standard library and numpy are used; safetensors files are written by hand:
[u64 LE header length][JSON header][raw little-endian tensor bytes], offsets relative to the data.

Examples:
  gen_checkpoint.py --family qwen2 --out /tmp/q --hidden 64 --layers 2 --heads 4 --kv-heads 2 \
      --ffn 96 --vocab 128 --tied --seed 1
  gen_checkpoint.py --preset qwen2.5-0.5b --out /tmp/q05 --tokenizer qwen2.5 --dtype bf16
Weights are N(0, std²) (std = --std), norms 1 + N(0, 0.01²); deterministic for a given --seed.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "gemma", "gemma2",
            "gemma3", "gemma3_text", "phi3"]

PRESETS = {
    # Qwen2.5-0.5B: hidden 896, 24 layers, 14 heads / 2 KV, FFN 4864, vocab 151936, tied.
    "qwen2.5-0.5b": dict(family="qwen2", hidden=896, layers=24, heads=14, kv_heads=2, ffn=4864,
                         vocab=151936, tied=True, rope_theta=1000000.0, max_pos=32768),
}


def shared_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "shared"))


def layer_tensors(a, i):
    """(name, shape, kind) of decoder layer i; kind in {w, norm, bias}."""
    fam, H, hd = a.family, a.hidden, a.head_dim
    nq, nkv = a.heads * hd, a.kv_heads * hd
    p = f"model.layers.{i}."
    out = [(p + "input_layernorm.weight", [H], "norm")]
    if fam == "phi3":
        out.append((p + "self_attn.qkv_proj.weight", [nq + 2 * nkv, H], "w"))
    else:
        out += [(p + "self_attn.q_proj.weight", [nq, H], "w"),
                (p + "self_attn.k_proj.weight", [nkv, H], "w"),
                (p + "self_attn.v_proj.weight", [nkv, H], "w")]
    if fam in ("qwen2", "qwen2_moe"):
        out += [(p + "self_attn.q_proj.bias", [nq], "bias"), (p + "self_attn.k_proj.bias", [nkv], "bias"),
                (p + "self_attn.v_proj.bias", [nkv], "bias")]
    if fam in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text"):
        out += [(p + "self_attn.q_norm.weight", [hd], "norm"), (p + "self_attn.k_norm.weight", [hd], "norm")]
    out.append((p + "self_attn.o_proj.weight", [H, nq], "w"))
    out.append((p + "post_attention_layernorm.weight", [H], "norm"))
    if fam in ("gemma2", "gemma3", "gemma3_text"):
        out += [(p + "pre_feedforward_layernorm.weight", [H], "norm"),
                (p + "post_feedforward_layernorm.weight", [H], "norm")]
    moe_layer = fam in ("qwen2_moe", "qwen3_moe") and a.experts > 0 and i not in a.mlp_only_layers
    if moe_layer:
        E, I = a.experts, a.moe_ffn
        out.append((p + "mlp.gate.weight", [E, H], "w"))
        for e in range(E):
            q = p + f"mlp.experts.{e}."
            out += [(q + "gate_proj.weight", [I, H], "w"), (q + "up_proj.weight", [I, H], "w"),
                    (q + "down_proj.weight", [H, I], "w")]
        if fam == "qwen2_moe" and a.shared_ffn > 0:
            S = a.shared_ffn
            q = p + "mlp.shared_expert."
            out += [(q + "gate_proj.weight", [S, H], "w"), (q + "up_proj.weight", [S, H], "w"),
                    (q + "down_proj.weight", [H, S], "w"), (p + "mlp.shared_expert_gate.weight", [1, H], "w")]
    elif fam == "phi3":
        out += [(p + "mlp.gate_up_proj.weight", [2 * a.ffn, H], "w"), (p + "mlp.down_proj.weight", [H, a.ffn], "w")]
    else:
        out += [(p + "mlp.gate_proj.weight", [a.ffn, H], "w"), (p + "mlp.up_proj.weight", [a.ffn, H], "w"),
                (p + "mlp.down_proj.weight", [H, a.ffn], "w")]
    return out


def all_tensors(a):
    pre = "language_model.model." if a.family == "gemma3" else "model."
    ts = [("model.embed_tokens.weight", [a.vocab, a.hidden], "w")]
    for i in range(a.layers):
        ts += layer_tensors(a, i)
    ts.append(("model.norm.weight", [a.hidden], "norm"))
    if not a.tied or a.write_tied_head:
        ts.append(("lm_head.weight", [a.vocab, a.hidden], "w"))
    if a.mtp:
        H = a.hidden
        ts += [("mtp.pre_fc_norm_embedding.weight", [H], "norm"), ("mtp.pre_fc_norm_hidden.weight", [H], "norm"),
               ("mtp.fc.weight", [H, 2 * H], "w"), ("mtp.norm.weight", [H], "norm")]
        ts += [(n.replace("model.layers.0.", "mtp.layers.0."), s, k) for (n, s, k) in layer_tensors(a, 0)]
    if a.family == "gemma3":
        ts = [(n.replace("model.", pre, 1) if n.startswith("model.") else
               ("language_model." + n if n.startswith("lm_head") else n), s, k) for (n, s, k) in ts]
        ts.append(("vision_tower.vision_model.embeddings.patch_embedding.weight", [8, 3, 2, 2], "w"))
        ts.append(("multi_modal_projector.mm_input_projection_weight", [8, a.hidden], "w"))
    return ts


def tokenizer_specials(src):
    """(bos id or None, eos id) of the tokenizer in directory src, from tokenizer_config.json's
    bos_token / eos_token and tokenizer.json's added tokens."""
    with open(os.path.join(src, "tokenizer_config.json")) as f:
        tc = json.load(f)
    with open(os.path.join(src, "tokenizer.json")) as f:
        added = {t["content"]: t["id"] for t in json.load(f).get("added_tokens", [])}

    def tid(key):
        v = tc.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        if v is None:
            return None
        if v not in added:
            sys.exit(f"{key} {v!r} of {src} is not an added token")
        return added[v]

    eos = tid("eos_token")
    if eos is None:
        sys.exit(f"{src}: tokenizer_config.json has no eos_token")
    return tid("bos_token"), eos


def config_for(a):
    fam = a.family
    text_type = "gemma3_text" if fam == "gemma3" else fam
    c = {
        "architectures": [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                           "qwen3": "Qwen3ForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
                           "qwen3_moe": "Qwen3MoeForCausalLM", "gemma": "GemmaForCausalLM",
                           "gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
                           "phi3": "Phi3ForCausalLM"}[text_type]],
        "model_type": text_type,
        "hidden_size": a.hidden, "intermediate_size": a.ffn, "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim,
        "vocab_size": a.vocab, "max_position_embeddings": a.max_pos, "rms_norm_eps": 1e-6,
        "rope_theta": a.rope_theta, "tie_word_embeddings": a.tied,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": {"f32": "float32", "f16": "float16",
                                                               "bf16": "bfloat16"}[a.dtype],
        "hidden_act": "silu", "rope_scaling": json.loads(a.rope_scaling) if a.rope_scaling else None,
    }
    if fam in ("gemma", "gemma2", "gemma3", "gemma3_text"):
        c["hidden_activation"] = "gelu_pytorch_tanh"
        c["hidden_act"] = "gelu_pytorch_tanh"
    if fam == "gemma2":
        c.update(attn_logit_softcapping=50.0, final_logit_softcapping=30.0, query_pre_attn_scalar=a.head_dim,
                 sliding_window=a.sliding_window or 4096)
    if fam in ("gemma3", "gemma3_text"):
        c.update(query_pre_attn_scalar=a.head_dim, sliding_window=a.sliding_window or 512, sliding_window_pattern=6,
                 rope_local_base_freq=10000.0, attn_logit_softcapping=None, final_logit_softcapping=None)
    if fam == "mistral":
        c["sliding_window"] = a.sliding_window
    if fam in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        c.update(use_sliding_window=False, sliding_window=a.sliding_window or 4096, max_window_layers=a.layers)
    if fam in ("qwen2_moe", "qwen3_moe"):
        c.update(num_experts=a.experts, num_experts_per_tok=a.top_k, moe_intermediate_size=a.moe_ffn,
                 norm_topk_prob=fam == "qwen3_moe", decoder_sparse_step=1, mlp_only_layers=a.mlp_only_layers)
        if fam == "qwen2_moe":
            c["shared_expert_intermediate_size"] = a.shared_ffn
    if fam == "phi3":
        c.update(sliding_window=a.sliding_window, original_max_position_embeddings=a.max_pos,
                 partial_rotary_factor=a.partial_rotary, pad_token_id=0)
    if a.mtp:
        c["mtp_num_hidden_layers"] = 1
    if fam == "gemma3":
        text = c
        c = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
             "vision_config": {"model_type": "siglip_vision_model"}, "eos_token_id": [1, 106],
             "tie_word_embeddings": a.tied}
        text.pop("tie_word_embeddings")
    return c


def to_bytes(x, dtype):
    if dtype == "f32":
        return x.astype("<f4").tobytes()
    if dtype == "f16":
        return x.astype("<f2").tobytes()
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    return r.tobytes()


def write_safetensors(path, tensors, a, rng, inject):
    es = {"f32": 4, "f16": 2, "bf16": 2}[a.dtype]
    st = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[a.dtype]
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in tensors:
        n = int(np.prod(shape)) if shape else 1
        header[name] = {"dtype": st, "shape": shape, "data_offsets": [off, off + n * es]}
        off += n * es
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for name, shape, kind in tensors:
            n = int(np.prod(shape)) if shape else 1
            if kind == "norm":
                x = 1.0 + 0.01 * rng.standard_normal(n, dtype=np.float32)
            else:
                x = a.std * rng.standard_normal(n, dtype=np.float32)
            if name in inject:
                x[n // 2] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}[inject[name]]
            # write in chunks to bound memory for big tensors
            step = 1 << 24
            for s in range(0, n, step):
                f.write(to_bytes(x[s:s + step], a.dtype))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=FAMILIES)
    ap.add_argument("--preset", choices=sorted(PRESETS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=0, help="default hidden/heads")
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--write-tied-head", action="store_true", help="also write lm_head.weight when tied")
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--moe-ffn", type=int, default=64)
    ap.add_argument("--shared-ffn", type=int, default=64)
    ap.add_argument("--mlp-only-layers", default="", help="comma-separated dense layers of a MoE model")
    ap.add_argument("--max-pos", type=int, default=2048)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--rope-scaling", default="", help="JSON object for config.rope_scaling")
    ap.add_argument("--sliding-window", type=int, default=0)
    ap.add_argument("--partial-rotary", type=float, default=1.0)
    ap.add_argument("--mtp", action="store_true", help="add a one-layer MTP block (mtp.*)")
    ap.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--shards", type=int, default=1, help="split into N files + model.safetensors.index.json")
    ap.add_argument("--tokenizer", default="none", help="name under ../shared/models/tokenizer-<name>, or none")
    ap.add_argument("--tokenizer-dir", default="",
                    help="directory holding tokenizer.json + tokenizer_config.json (e.g. models/stories260K); "
                         "used instead of --tokenizer")
    ap.add_argument("--chat-template-file", action="store_true", help="write chat_template.jinja")
    ap.add_argument("--inject", action="append", default=[], help="NAME=nan|inf|-inf (one element)")
    a = ap.parse_args()
    if a.preset:
        for k, v in PRESETS[a.preset].items():
            setattr(a, k, v)
    if not a.family:
        ap.error("--family or --preset is required")
    if not a.head_dim:
        a.head_dim = a.hidden // a.heads
    if a.family == "mistral" and not a.sliding_window:
        a.sliding_window = None
    if a.family == "phi3" and not a.sliding_window:
        a.sliding_window = None
    a.mlp_only_layers = [int(x) for x in a.mlp_only_layers.split(",") if x]
    inject = dict(x.split("=", 1) for x in a.inject)
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    ts = all_tensors(a)
    if a.shards <= 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), ts, a, rng, inject)
    else:
        per = (len(ts) + a.shards - 1) // a.shards
        wm = {}
        for k in range(a.shards):
            part = ts[k * per:(k + 1) * per]
            fn = f"model-{k + 1:05d}-of-{a.shards:05d}.safetensors"
            write_safetensors(os.path.join(a.out, fn), part, a, rng, inject)
            for n, _, _ in part:
                wm[n] = fn
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wm}, f, indent=1)
    cfg = config_for(a)
    gen = {"bos_token_id": 1, "eos_token_id": [2, 3], "do_sample": False}
    src = None
    if a.tokenizer != "none" or a.tokenizer_dir:
        src = a.tokenizer_dir or os.path.join(shared_dir(), "models", "tokenizer-" + a.tokenizer)
        if not os.path.isdir(src):
            sys.exit(f"tokenizer directory {src} not found")
        # BOS / EOS ids of the tokenizer's own special tokens (tokenizer_config.json), as the real
        # checkpoint's config says; Qwen has no BOS (null)
        bos, eos = tokenizer_specials(src)
        cfg["bos_token_id"] = bos
        cfg["eos_token_id"] = eos if cfg["eos_token_id"] == 2 else cfg["eos_token_id"]
        gen = {"bos_token_id": bos, "eos_token_id": [eos], "do_sample": False}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    if src:
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            if os.path.exists(os.path.join(src, fn)):
                shutil.copyfile(os.path.join(src, fn), os.path.join(a.out, fn))
    if a.chat_template_file:
        with open(os.path.join(a.out, "chat_template.jinja"), "w") as f:
            f.write("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}")


if __name__ == "__main__":
    main()
