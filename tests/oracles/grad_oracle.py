#!/usr/bin/python3
"""Gradient oracle for the backward pass (issue 29 item 2): PyTorch autograd in float64.

The models are the forward-parity ones (fwd_oracle.py: the same configs, deterministic weights and
prompts, so src/train/backward_test.cc regenerates identical f32 weights from
tests/golden/forward/<family>.json). The loss is the mean next-token cross-entropy over the prompt
(row t predicts prompt[t+1]); its value and the gradient of every tensor are written to
tests/golden/grad/<family>.json.

Run: /usr/bin/python3 tests/oracles/grad_oracle.py   (needs Debian python3-torch)
"""
import json, os, sys
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fwd_oracle as fo  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "grad")
FAMILIES = ["llama", "qwen2", "qwen3", "llama3_rope"]


def gated_mlp(c, W, p, x):
    """fwd_oracle.mlp with the soft neuron gates of a variant: act ⊙ alive ⊙ gates (p + '__gates')."""
    a = fo.act(c, W[p + "gate_proj.weight"] @ x) * (W[p + "up_proj.weight"] @ x)
    if p + "__gates" in W:
        a = a * W[p + "__alive"] * W[p + "__gates"]
    return W[p + "down_proj.weight"] @ a


def gates_case():
    """llama with soft gates on every layer's FFN (uniform in [0.5, 1.5], seed 7) and neurons 0..3 of
    layer 0 masked: the loss, every gate's gradient and every tensor's."""
    names = list(fo.FAMILIES.keys())
    c = dict(fo.BASE)
    seed = 1000 + names.index("llama")
    tl = fo.tensors_for(c)
    W = {n: fo.gen_tensor(seed, n, s, k).double().requires_grad_(True) for n, s, k in tl}
    rng = np.random.default_rng(seed)
    prompt = [int(x) for x in rng.integers(0, c["vocab"], 12)]
    g_rng = np.random.default_rng(7)
    gates = []
    for l in range(c["layers"]):
        g = torch.tensor(g_rng.uniform(0.5, 1.5, c["ffn"]).astype(np.float32)).double().requires_grad_(True)
        alive = torch.ones(c["ffn"], dtype=torch.float64)
        if l == 0:
            alive[:4] = 0
        W[f"model.layers.{l}.mlp.__gates"] = g
        W[f"model.layers.{l}.mlp.__alive"] = alive
        gates.append(g)
    fo.mlp = gated_mlp
    logits = fo.forward(c, W, prompt)
    loss = torch.nn.functional.cross_entropy(logits[:-1].double(), torch.tensor(prompt[1:]))
    loss.backward()
    doc = dict(family="llama", seed=seed, prompt=prompt, loss=float(loss), gate_seed=7, masked_layer0=[0, 1, 2, 3],
               gates=[[float(x) for x in g.detach().tolist()] for g in gates],
               gate_grads=[[float("%.9g" % x) for x in g.grad.tolist()] for g in gates],
               grads={n: [float("%.9g" % x) for x in W[n].grad.reshape(-1).tolist()] for n, _, _ in tl})
    with open(os.path.join(OUT, "llama_gates.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print("llama_gates loss", float(loss))


def main():
    torch.set_grad_enabled(True)
    # fwd_oracle computes norms and softmax in .float(): here everything is float64.
    torch.Tensor.float = lambda self: self.double()
    torch.set_default_dtype(torch.float64)
    os.makedirs(OUT, exist_ok=True)
    names = list(fo.FAMILIES.keys())
    for fam in FAMILIES:
        c = dict(fo.BASE)
        c.update(fo.FAMILIES[fam])
        seed = 1000 + names.index(fam)
        tl = fo.tensors_for(c)
        W = {n: fo.gen_tensor(seed, n, s, k).double().requires_grad_(True) for n, s, k in tl}
        rng = np.random.default_rng(seed)
        prompt = [int(x) for x in rng.integers(0, c["vocab"], 12)]
        logits = fo.forward(c, W, prompt)
        loss = torch.nn.functional.cross_entropy(logits[:-1].double(), torch.tensor(prompt[1:]))
        loss.backward()
        doc = dict(family=fam, seed=seed, oracle="tests/oracles/grad_oracle.py (PyTorch %s, float64)" % torch.__version__,
                   prompt=prompt, loss=float(loss),
                   grads={n: [float("%.9g" % x) for x in W[n].grad.reshape(-1).tolist()] for n, _, _ in tl})
        if fam == "llama":  # ten AdamW steps on the same sequence (torch.optim.AdamW semantics)
            opt = torch.optim.AdamW([W[n] for n, _, _ in tl], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
            losses = []
            for _ in range(10):
                opt.zero_grad()
                lg = fo.forward(c, W, prompt)
                l = torch.nn.functional.cross_entropy(lg[:-1].double(), torch.tensor(prompt[1:]))
                losses.append(float(l))
                l.backward()
                opt.step()
            keep = ["model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight", "model.norm.weight"]
            doc["adamw"] = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, losses=losses,
                                params={n: [float("%.9g" % x) for x in W[n].detach().reshape(-1).tolist()] for n in keep})
        with open(os.path.join(OUT, fam + ".json"), "w") as f:
            json.dump(doc, f, separators=(",", ":"))
        print(fam, "loss", float(loss))
    gates_case()


if __name__ == "__main__":
    main()
