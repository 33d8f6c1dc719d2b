#!/usr/bin/python3
"""Golden for specialize::fit_descriptor's power iteration: a small random φ set and the exact
eigendecomposition (numpy.linalg.eigh) of its centered scatter matrix Σ c_i c_iᵀ.

Writes tests/golden/routing/eig.json: {n, hidden, phis [n*hidden], mean [hidden],
eigvals [k] (descending), eigvecs [k][hidden] (unit rows, sign: largest |component| positive)}.
"""
import json, os
import numpy as np

rng = np.random.default_rng(20261205)
n, h = 10, 6
q, _ = np.linalg.qr(rng.standard_normal((h, h)))
scales = np.array([5.0, 3.0, 1.8, 1.0, 0.5, 0.3])
phis = (rng.standard_normal((n, h)) * scales) @ q.T + rng.standard_normal(h) * 2.0
phis = phis.astype(np.float32).astype(np.float64)
mean = phis.mean(axis=0)
c = phis - mean
w, v = np.linalg.eigh(c.T @ c)
order = np.argsort(w)[::-1]
w, v = w[order], v[:, order].T
for row in v:
    if row[np.argmax(np.abs(row))] < 0:
        row *= -1
out = {"n": n, "hidden": h, "phis": phis.ravel().tolist(), "mean": mean.tolist(),
       "eigvals": w[:4].tolist(), "eigvecs": v[:4].tolist()}
path = os.path.join(os.path.dirname(__file__), "..", "golden", "routing", "eig.json")
with open(path, "w") as f:
    json.dump(out, f, indent=1)
print("eigvals", w)
