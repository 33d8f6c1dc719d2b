#!/usr/bin/python3
"""Parity oracle for the CPU forward pass (issue 5 item 5).

A PyTorch forward written from Hugging Face transformers' modeling code (modeling_llama, _mistral,
_qwen2, _qwen3, _gemma, _gemma2, _gemma3, _phi3, _qwen2_moe, _qwen3_moe; rope init functions of
modeling_rope_utils) for tiny checkpoints of every family. Weights are generated deterministically
(SplitMix64 per tensor, see gen_tensor) so the C++ test (src/model/forward_parity_test.cc)
regenerates the identical f32 weights; nothing but the goldens is committed.

Output: tests/golden/forward/<family>.json with the CMF arch the converter would write, the tensor
list, a prompt, the last-position logits, a 32-token greedy continuation, and the same two things
with layer 1 skipped (the oracle for a task mask that closes layer 1).

Run: /usr/bin/python3 tests/oracles/fwd_oracle.py   (needs Debian python3-torch)
"""
import json, math, os, sys
import numpy as np
import torch

torch.set_grad_enabled(False)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "forward")
M64 = (1 << 64) - 1


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def splitmix(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def gen_tensor(seed, name, shape, init):
    """u = (next>>40)/2^24 (f32-exact); v = 2u-1 (exact); value by init kind, f32 arithmetic:
    mat: v*f32(sqrt(3/cols)); embed: v; norm1: 1+v*0.1f; norm0/bias: v*0.1f."""
    n = int(np.prod(shape))
    st = (seed ^ fnv1a64(name)) & M64
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        st, z = splitmix(st)
        out[i] = np.float32(z >> 40) / np.float32(16777216.0)
    v = out * np.float32(2.0) - np.float32(1.0)
    if init == "mat":
        cols = int(np.prod(shape[1:]))
        v = v * np.float32(math.sqrt(3.0 / cols))
    elif init == "norm1":
        v = np.float32(1.0) + v * np.float32(0.1)
    elif init in ("norm0", "bias"):
        v = v * np.float32(0.1)
    return torch.from_numpy(v.reshape(shape).copy())


BASE = dict(hidden=32, heads=4, kv=2, hd=8, layers=2, ffn=48, vocab=64, maxpos=128, eps=1e-6, theta=10000.0)

FAMILIES = {
    "llama": dict(),
    "llama3_rope": dict(llama3=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=16), theta=500000.0),
    "mistral": dict(sliding=6),
    "qwen2": dict(bias=True),
    "qwen2_yarn": dict(bias=True, yarn=dict(factor=4.0, original_max_position_embeddings=16, beta_fast=32.0, beta_slow=1.0)),
    "qwen3": dict(qk_norm=True, hd=16),
    "gemma": dict(gemma=True, hd=16, act="gelu_tanh"),
    "gemma2": dict(gemma=True, act="gelu_tanh", sandwich=True, attn_softcap=2.0, final_softcap=3.0, qpas=24.0, sliding=6, alt_sliding=2),
    "gemma3": dict(gemma=True, act="gelu_tanh", sandwich=True, qk_norm=True, qpas=16.0, sliding=6, alt_sliding=2, theta=1e6, local_theta=10000.0, layers=3),
    "phi3": dict(partial=0.5, hd=16, heads=2, kv=2),
    "qwen2_moe": dict(bias=True, moe=dict(experts=4, top_k=2, ffn=24, norm_topk=False, shared=40)),
    "qwen3_moe": dict(qk_norm=True, moe=dict(experts=4, top_k=2, ffn=24, norm_topk=True, shared=None)),
}


def tensors_for(c):
    H, hd, nh, nkv, V = c["hidden"], c["hd"], c["heads"], c["kv"], c["vocab"]
    norm = "norm0" if c.get("gemma") else "norm1"
    t = [("model.embed_tokens.weight", [V, H], "embed"), ("model.norm.weight", [H], norm)]
    for l in range(c["layers"]):
        p = f"model.layers.{l}."
        t += [(p + "input_layernorm.weight", [H], norm), (p + "post_attention_layernorm.weight", [H], norm)]
        if c.get("sandwich"):
            t += [(p + "pre_feedforward_layernorm.weight", [H], norm), (p + "post_feedforward_layernorm.weight", [H], norm)]
        t += [(p + "self_attn.q_proj.weight", [nh * hd, H], "mat"), (p + "self_attn.k_proj.weight", [nkv * hd, H], "mat"),
              (p + "self_attn.v_proj.weight", [nkv * hd, H], "mat"), (p + "self_attn.o_proj.weight", [H, nh * hd], "mat")]
        if c.get("bias"):
            t += [(p + "self_attn.q_proj.bias", [nh * hd], "bias"), (p + "self_attn.k_proj.bias", [nkv * hd], "bias"),
                  (p + "self_attn.v_proj.bias", [nkv * hd], "bias")]
        if c.get("qk_norm"):
            t += [(p + "self_attn.q_norm.weight", [hd], norm), (p + "self_attn.k_norm.weight", [hd], norm)]
        if c.get("moe"):
            m = c["moe"]
            t.append((p + "mlp.gate.weight", [m["experts"], H], "mat"))
            for e in range(m["experts"]):
                q = p + f"mlp.experts.{e}."
                t += [(q + "gate_proj.weight", [m["ffn"], H], "mat"), (q + "up_proj.weight", [m["ffn"], H], "mat"),
                      (q + "down_proj.weight", [H, m["ffn"]], "mat")]
            if m["shared"]:
                q = p + "mlp.shared_expert."
                t += [(q + "gate_proj.weight", [m["shared"], H], "mat"), (q + "up_proj.weight", [m["shared"], H], "mat"),
                      (q + "down_proj.weight", [H, m["shared"]], "mat"), (p + "mlp.shared_expert_gate.weight", [1, H], "mat")]
        else:
            F = c["ffn"]
            t += [(p + "mlp.gate_proj.weight", [F, H], "mat"), (p + "mlp.up_proj.weight", [F, H], "mat"),
                  (p + "mlp.down_proj.weight", [H, F], "mat")]
    return t


# ---- transformers semantics -------------------------------------------------------------------

def rms(x, w, eps, gemma):
    # LlamaRMSNorm / Qwen2RMSNorm: x * rsqrt(mean(x^2)+eps) * w ; GemmaRMSNorm: ... * (1 + w)
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return y * (1.0 + w.float()) if gemma else w * y


def inv_freq_for(c, local=False):
    hd = c["hd"]
    dim = int(hd * c.get("partial", 1.0))
    base = c.get("local_theta") if local else c["theta"]
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scale = 1.0
    if not local and c.get("llama3"):  # _compute_llama3_parameters
        r = c["llama3"]
        f, lf, hf, old = r["factor"], r["low_freq_factor"], r["high_freq_factor"], r["original_max_position_embeddings"]
        low_wl, high_wl = old / lf, old / hf
        wl = 2 * math.pi / inv
        inv_l = torch.where(wl > low_wl, inv / f, inv)
        smooth = (old / wl - lf) / (hf - lf)
        smoothed = (1 - smooth) * inv_l / f + smooth * inv_l
        med = ~(wl < high_wl) * ~(wl > low_wl)
        inv = torch.where(med, smoothed, inv_l)
    if not local and c.get("yarn"):  # _compute_yarn_parameters (truncate=True)
        y = c["yarn"]
        f, orig = y["factor"], y["original_max_position_embeddings"]
        scale = 0.1 * math.log(f) + 1.0

        def corr(nrot):
            return (dim * math.log(orig / (nrot * 2 * math.pi))) / (2 * math.log(base))
        low, high = max(math.floor(corr(y["beta_fast"])), 0), min(math.ceil(corr(y["beta_slow"])), dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        extra_factor = 1 - ramp
        pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
        inv = (1.0 / (f * pos_freqs)) * (1 - extra_factor) + (1.0 / pos_freqs) * extra_factor
    return inv, dim, scale


def rope(x, pos, inv, dim, scale):
    # apply_rotary_pos_emb with rotate_half on the first `dim` dims (Phi-3 / partial rotary)
    freqs = pos[:, None].float() * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * scale, emb.sin() * scale
    xr, xp = x[..., :dim], x[..., dim:]
    x1, x2 = xr[..., : dim // 2], xr[..., dim // 2:]
    rot = torch.cat((-x2, x1), dim=-1)
    return torch.cat((xr * cos[:, None, :] + rot * sin[:, None, :], xp), dim=-1)


def act(c, g):
    if c.get("act") == "gelu_tanh":
        return torch.nn.functional.gelu(g, approximate="tanh")
    return torch.nn.functional.silu(g)


def mlp(c, W, p, x):
    return W[p + "down_proj.weight"] @ (act(c, W[p + "gate_proj.weight"] @ x) * (W[p + "up_proj.weight"] @ x))


def moe(c, W, p, x):  # Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock, one token
    m = c["moe"]
    logits = W[p + "mlp.gate.weight"] @ x
    probs = torch.softmax(logits.float(), dim=-1)
    w, idx = torch.topk(probs, m["top_k"])
    if m["norm_topk"]:
        w = w / w.sum()
    out = torch.zeros_like(x)
    for k in range(m["top_k"]):
        out += w[k] * mlp(c, W, p + f"mlp.experts.{int(idx[k])}.", x)
    if m["shared"]:
        s = mlp(c, W, p + "mlp.shared_expert.", x)
        out += torch.sigmoid(W[p + "mlp.shared_expert_gate.weight"] @ x) * s
    return out


def is_sliding(c, l):
    if not c.get("sliding"):
        return False
    if c.get("alt_sliding"):  # gemma2: even layers sliding; gemma3: pattern (l+1) % p != 0
        return (l + 1) % c["alt_sliding"] != 0
    return True


def forward(c, W, ids, skip_layers=()):
    H, hd, nh, nkv = c["hidden"], c["hd"], c["heads"], c["kv"]
    gem = bool(c.get("gemma"))
    T = len(ids)
    pos = torch.arange(T)
    h = W["model.embed_tokens.weight"][torch.tensor(ids)]
    if gem:
        h = h * torch.tensor(H ** 0.5, dtype=h.dtype)
    for l in range(c["layers"]):
        if l in skip_layers:
            continue
        p = f"model.layers.{l}."
        x = rms(h, W[p + "input_layernorm.weight"], c["eps"], gem)
        q = x @ W[p + "self_attn.q_proj.weight"].T
        k = x @ W[p + "self_attn.k_proj.weight"].T
        v = x @ W[p + "self_attn.v_proj.weight"].T
        if c.get("bias"):
            q = q + W[p + "self_attn.q_proj.bias"]
            k = k + W[p + "self_attn.k_proj.bias"]
            v = v + W[p + "self_attn.v_proj.bias"]
        q, k, v = q.view(T, nh, hd), k.view(T, nkv, hd), v.view(T, nkv, hd)
        if c.get("qk_norm"):
            q = rms(q, W[p + "self_attn.q_norm.weight"], c["eps"], gem)
            k = rms(k, W[p + "self_attn.k_norm.weight"], c["eps"], gem)
        sl = is_sliding(c, l)
        inv, dim, sc = inv_freq_for(c, local=sl and "local_theta" in c)
        q, k = rope(q, pos, inv, dim, sc), rope(k, pos, inv, dim, sc)
        rep = nh // nkv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scaling = (c["qpas"] if c.get("qpas") else hd) ** -0.5
        s = torch.einsum("thd,shd->hts", q, k) * scaling
        if c.get("attn_softcap"):
            s = torch.tanh(s / c["attn_softcap"]) * c["attn_softcap"]
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        if sl:
            mask &= (pos[:, None] - pos[None, :]) < c["sliding"]
        s = s.masked_fill(~mask, float("-inf"))
        a = torch.softmax(s.float(), dim=-1)
        o = torch.einsum("hts,shd->thd", a, v).reshape(T, nh * hd) @ W[p + "self_attn.o_proj.weight"].T
        if c.get("sandwich"):
            o = rms(o, W[p + "post_attention_layernorm.weight"], c["eps"], gem)
        h = h + o
        x = rms(h, W[p + ("pre_feedforward_layernorm.weight" if c.get("sandwich") else "post_attention_layernorm.weight")],
                c["eps"], gem)
        if c.get("moe"):
            f = torch.stack([moe(c, W, p, x[t]) for t in range(T)])
        else:
            f = torch.stack([mlp(c, W, p + "mlp.", x[t]) for t in range(T)])
        if c.get("sandwich"):
            f = rms(f, W[p + "post_feedforward_layernorm.weight"], c["eps"], gem)
        h = h + f
    h = rms(h, W["model.norm.weight"], c["eps"], gem)
    logits = h @ W["model.embed_tokens.weight"].T  # tied head
    if c.get("final_softcap"):
        logits = torch.tanh(logits / c["final_softcap"]) * c["final_softcap"]
    return logits


def greedy(c, W, ids, n, skip=()):
    ids = list(ids)
    out = []
    for _ in range(n):
        lg = forward(c, W, ids, skip)[-1]
        t = int(torch.argmax(lg))
        out.append(t)
        ids.append(t)
    return out


def cmf_arch(fam, c):
    """The ModelArch the converter writes for this config (FORMAT-NOTES §1.5)."""
    a = dict(arch_name=fam.split("_")[0] if fam not in ("qwen2_moe", "qwen3_moe") else fam,
             hidden_size=c["hidden"], intermediate_size=c["ffn"], num_layers=c["layers"],
             num_attention_heads=c["heads"], num_kv_heads=c["kv"], head_dim=c["hd"], vocab_size=c["vocab"],
             layer_types=["SlidingAttention" if is_sliding(c, l) else "FullAttention" for l in range(c["layers"])],
             rms_norm_eps=c["eps"], max_position_embeddings=c["maxpos"], rope_theta=c["theta"],
             tie_word_embeddings=True)
    if c.get("gemma"):
        a["norm_style"] = "gemma"
        a["embed_multiplier"] = float(np.float32(c["hidden"] ** 0.5))
    if c.get("act"):
        a["hidden_act"] = c["act"]
    if c.get("partial"):
        a["partial_rotary_factor"] = c["partial"]
    if c.get("sliding"):
        a["sliding_window"] = c["sliding"]
    if c.get("qpas"):
        a["query_pre_attn_scalar"] = c["qpas"]
    if c.get("attn_softcap"):
        a["attn_logit_softcapping"] = c["attn_softcap"]
    if c.get("final_softcap"):
        a["final_logit_softcapping"] = c["final_softcap"]
    if c.get("local_theta"):
        a["rope_local_base_freq"] = c["local_theta"]
    if c.get("llama3"):  # converter folds llama3 rope_scaling into per-index divisors
        inv0, dim, _ = inv_freq_for(dict(c, llama3=None))
        inv1, _, _ = inv_freq_for(c)
        a["rope_freq_factors"] = [float(x) for x in (inv0.double() / inv1.double())]
    if c.get("yarn"):
        y = c["yarn"]
        a["yarn"] = dict(factor=y["factor"], original_max_position_embeddings=y["original_max_position_embeddings"],
                         beta_fast=y["beta_fast"], beta_slow=y["beta_slow"], attention_factor=0.1 * math.log(y["factor"]) + 1.0)
    if c.get("moe"):
        m = c["moe"]
        a["moe"] = dict(num_experts=m["experts"], top_k=m["top_k"], moe_intermediate_size=m["ffn"],
                        norm_topk_prob=m["norm_topk"])
        if m["shared"]:
            a["moe"]["shared_expert_intermediate_size"] = m["shared"]
    return a


def main():
    os.makedirs(OUT, exist_ok=True)
    only = sys.argv[1:]
    for i, (fam, over) in enumerate(FAMILIES.items()):
        if only and fam not in only:
            continue
        c = dict(BASE)
        c.update(over)
        seed = 1000 + i
        tl = tensors_for(c)
        W = {n: gen_tensor(seed, n, s, k) for n, s, k in tl}
        rng = np.random.default_rng(seed)
        prompt = [int(x) for x in rng.integers(0, c["vocab"], 12)]
        logits = forward(c, W, prompt)[-1]
        g = greedy(c, W, prompt, 32)
        skip_logits = forward(c, W, prompt, skip_layers=(1,))[-1]
        g_skip = greedy(c, W, prompt, 8, skip=(1,))
        doc = dict(family=fam, seed=seed, oracle="tests/oracles/fwd_oracle.py (PyTorch %s)" % torch.__version__,
                   cmf_arch=cmf_arch(fam, c), tensors=[dict(name=n, shape=s, init=k) for n, s, k in tl],
                   prompt=prompt, last_logits=[float(x) for x in logits], greedy=g,
                   skip_layer=1, skip_last_logits=[float(x) for x in skip_logits], skip_greedy=g_skip)
        with open(os.path.join(OUT, fam + ".json"), "w") as f:
            json.dump(doc, f, indent=0)
        print(fam, "ok", g[:8])


if __name__ == "__main__":
    main()
