#!/usr/bin/python3
"""Trainer speed side by side with PyTorch (issue 29 item 6): the testbed config (llama, hidden
256, 6 layers, 8 heads / 4 KV, FFN 768, vocab 4096, tied) trained on random token windows of
batch × seq_len, AdamW, in torch float32; prints tokens/s and GFLOP/s (6 · params · tokens, the
usual estimate without attention) for the given thread count. Run beside
`cortiq train ... --steps N --threads T --log F` on the same shape (bench/README.md).

Usage: bench/train_vs_torch.py THREADS [STEPS=5] [BATCH=16] [SEQ=256]
"""
import sys, time
import torch

T_ = int(sys.argv[1]); STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
B = int(sys.argv[3]) if len(sys.argv) > 3 else 16; S = int(sys.argv[4]) if len(sys.argv) > 4 else 256
torch.set_num_threads(T_)
H, L, NH, NKV, F, V = 256, 6, 8, 4, 768, 4096
HD = H // NH
torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = torch.nn.Parameter(torch.ones(H)); self.n2 = torch.nn.Parameter(torch.ones(H))
        self.q = torch.nn.Linear(H, NH * HD, bias=False); self.k = torch.nn.Linear(H, NKV * HD, bias=False)
        self.v = torch.nn.Linear(H, NKV * HD, bias=False); self.o = torch.nn.Linear(NH * HD, H, bias=False)
        self.g = torch.nn.Linear(H, F, bias=False); self.u = torch.nn.Linear(H, F, bias=False)
        self.d = torch.nn.Linear(F, H, bias=False)


def rms(x, w):
    return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)


inv = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
fr = torch.arange(S).float()[:, None] * inv[None, :]
cos, sin = torch.cat((fr, fr), -1).cos(), torch.cat((fr, fr), -1).sin()


def rope(x):  # [B, heads, S, HD]
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat((-x2, x1), -1) * sin


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, H); self.blocks = torch.nn.ModuleList([Block() for _ in range(L)])
        self.nf = torch.nn.Parameter(torch.ones(H))

    def forward(self, ids):
        h = self.emb(ids)
        mask = torch.ones(S, S, dtype=torch.bool).tril()
        for b in self.blocks:
            x = rms(h, b.n1)
            q = rope(b.q(x).view(B, S, NH, HD).transpose(1, 2))
            k = rope(b.k(x).view(B, S, NKV, HD).transpose(1, 2)).repeat_interleave(NH // NKV, 1)
            v = b.v(x).view(B, S, NKV, HD).transpose(1, 2).repeat_interleave(NH // NKV, 1)
            a = torch.softmax((q @ k.transpose(-1, -2) / HD ** 0.5).masked_fill(~mask, float("-inf")), -1)
            h = h + b.o((a @ v).transpose(1, 2).reshape(B, S, H))
            x = rms(h, b.n2)
            h = h + b.d(torch.nn.functional.silu(b.g(x)) * b.u(x))
        return rms(h, self.nf) @ self.emb.weight.T


m = Model()
params = sum(p.numel() for p in m.parameters())
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
ids = torch.randint(0, V, (B, S + 1))


def step():
    opt.zero_grad()
    lg = m(ids[:, :S])
    loss = torch.nn.functional.cross_entropy(lg.reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()


step()  # warm-up
t0, c0 = time.time(), time.process_time()
for _ in range(STEPS):
    step()
dt = (time.time() - t0) / STEPS
cpu = (time.process_time() - c0) / STEPS  # CPU seconds of all threads (a shared host's load aside)
tok = B * S / dt
print("torch %s threads=%d params=%.2fM  %.0f tok/s  %.1f GFLOP/s  (%.2f s/step)  cpu %.0f tok/s" %
      (torch.__version__, T_, params / 1e6, tok, 6 * params * tok / 1e9, dt, B * S / cpu))
