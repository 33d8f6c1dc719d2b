#!/usr/bin/python3
"""Writes a SentencePiece `tokenizer.model` (a serialized sentencepiece.ModelProto) for a
SentencePiece-BPE tokenizer.json (byte_fallback, as transformers' LlamaConverter builds it, e.g.
Mistral-7B v0.1's), by hand in the protobuf wire format (no protobuf package).

The tokenizer.json keeps no scores, so a piece made by a merge scores -(rank of its first merge)
and every other piece -(number of merges + id): the merge order LlamaConverter read from the real
scores, which is all a BPE SentencePiece model uses of them. A file written here therefore proves
that a reader rebuilds the same tokenizer from a ModelProto; it is not Mistral's own
tokenizer.model (its scores differ).

ModelProto fields written: 1 pieces (1 piece, 2 score f32, 3 type: NORMAL 1, UNKNOWN 2, CONTROL 3,
BYTE 6); 2 trainer_spec (3 model_type BPE = 2, 35 byte_fallback, 40 unk_id, 41 bos_id, 42 eos_id,
43 pad_id); 3 normalizer_spec (3 add_dummy_prefix, true when the normalizer prepends "▁").

usage: spm_from_tokenizer_json.py tokenizer.json tokenizer.model
"""
import json
import struct
import sys


def varint(n):
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num, wire, payload):
    key = varint(num << 3 | wire)
    if wire == 0:
        return key + varint(payload)
    if wire == 5:
        return key + struct.pack("<f", payload)
    return key + varint(len(payload)) + payload  # wire 2


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        tj = json.load(f)
    model = tj["model"]
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        sys.exit(f"{src}: not a SentencePiece BPE (byte_fallback) tokenizer.json")
    vocab = model["vocab"]
    pieces = [None] * (max(vocab.values()) + 1)
    for p, i in vocab.items():
        pieces[i] = p
    if any(p is None for p in pieces):
        sys.exit(f"{src}: the vocabulary ids have holes")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    score = {}
    for rank, m in enumerate(merges):
        left, right = m.split(" ", 1)
        score.setdefault(left + right, -float(rank))
    specials = {a["content"] for a in tj.get("added_tokens", []) if a.get("special")}
    unk = model.get("unk_token")
    proto = bytearray()
    for i, p in enumerate(pieces):
        s = score.get(p, -float(len(merges) + i))
        if p == unk:
            t = 2
        elif p in specials:
            t = 3
        elif len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
            t = 6
        else:
            t = 1
        proto += field(1, 2, field(1, 2, p.encode("utf-8")) + field(2, 5, s) + field(3, 0, t))
    ids = {p: i for i, p in enumerate(pieces)}
    trainer = field(3, 0, 2) + field(35, 0, 1)
    for num, name in ((40, unk), (41, "<s>"), (42, "</s>")):
        trainer += field(num, 0, ids.get(name, -1))
    trainer += field(43, 0, -1)
    proto += field(2, 2, trainer)
    prepend = "Prepend" in json.dumps(tj.get("normalizer"))
    proto += field(3, 2, field(3, 0, 1 if prepend else 0))
    with open(dst, "wb") as f:
        f.write(proto)


if __name__ == "__main__":
    main()
