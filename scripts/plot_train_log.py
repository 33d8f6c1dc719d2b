#!/usr/bin/python3
"""Loss curve of a `cortiq train --log` JSON-lines file as a PNG (Debian python3-matplotlib).

Usage: scripts/plot_train_log.py LOG.jsonl OUT.png [TITLE]
Plots the training loss of every step and the validation loss where it was measured, against the
tokens seen, with the perplexity scale on the right axis.
"""
import json, math, sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    log, out = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else "cortiq train"
    rows = [json.loads(l) for l in open(log) if l.strip()]
    tok = [r["tokens"] / 1e6 for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    ax.plot(tok, [r["loss"] for r in rows], lw=0.8, color="#4477aa", label="train (batch mean)")
    v = [(r["tokens"] / 1e6, r["val_loss"]) for r in rows if "val_loss" in r]
    if v:
        ax.plot([x for x, _ in v], [y for _, y in v], "o-", ms=3, color="#cc6677", label="validation")
    ax.set_xlabel("tokens seen (millions)")
    ax.set_ylabel("loss (nats / token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    lo, hi = ax.get_ylim()
    right = ax.twinx()
    right.set_ylim(lo, hi)
    ticks = [t for t in ax.get_yticks() if lo <= t <= hi]
    right.set_yticks(ticks)
    right.set_yticklabels(["%.0f" % math.exp(t) for t in ticks])
    right.set_ylabel("perplexity")
    fig.tight_layout()
    fig.savefig(out)


if __name__ == "__main__":
    main()
