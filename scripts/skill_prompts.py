#!/usr/bin/env python3
"""Router prompts for `cortiq skill add --prompts`: N windows of a corpus split.

usage: skill_prompts.py SPLIT.txt N [--seed S] [--min-chars 80] [--max-chars 400] > prompts.txt

Documents in SPLIT.txt are separated by lines holding only <|endoftext|> (the testbed corpus's
format). Each window is taken from a random document (uniform over documents), starts at a random
line of it and runs for a random length in [min-chars, max-chars] (cut at the document's end);
windows are written separated by <|endoftext|> lines, the format `skill add` reads.
"""
import argparse
import random

ap = argparse.ArgumentParser()
ap.add_argument("split")
ap.add_argument("n", type=int)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--min-chars", type=int, default=80)
ap.add_argument("--max-chars", type=int, default=400)
a = ap.parse_args()

docs = [d.strip("\n") for d in open(a.split, encoding="utf-8").read().split("\n<|endoftext|>\n")]
docs = [d for d in docs if len(d) >= a.min_chars]
rng = random.Random(a.seed)
out = []
while len(out) < a.n:
    d = rng.choice(docs)
    starts = [0] + [i + 1 for i, c in enumerate(d) if c == "\n" and i + 1 < len(d) - a.min_chars]
    s = rng.choice(starts)
    w = d[s:s + rng.randint(a.min_chars, a.max_chars)].strip()
    if len(w) >= a.min_chars // 2 and "<|endoftext|>" not in w:
        out.append(w)
print("\n<|endoftext|>\n".join(out))
