#!/usr/bin/env python3
"""Cortiq against llama.cpp's llama-bench on the same weights, interleaved (issue 34 item 4).

Generates the Qwen2.5-0.5B-shaped random checkpoint (tests/tools/gen_checkpoint.py --preset
qwen2.5-0.5b --tokenizer qwen2.5 --seed 1), writes it as an F32 GGUF with `cortiq export-gguf` of its
f32 conversion (tests/tools/hf_to_gguf.py writes the same tensors and keys but no tokenizer, which
llama.cpp needs to load a model), makes the Q8_0 /
Q4_0 / F16 GGUFs with llama.cpp's llama-quantize and the q8 / q4 / q4tp / f16 CMF files with
`cortiq convert`; then runs, for R rounds, every pair (CMF codec, GGUF type) as
`cortiq bench F -p P -n N -r REPS -t T` and `llama-bench -m F -p P -n N -r REPS -t T`, the order of
the two alternating per round, and prints a markdown table of the medians over all samples
(REPS x R per cell) in tok/s with the ratio Cortiq / llama.cpp, plus the kernel each Cortiq run
used (its SIMD tier) and the host's load average before each round.

llama.cpp itself is not part of this project: build it CPU-only with GGML_NATIVE=ON outside the
repository (see bench/README.md) and pass its bin folder.

Usage: bench/vs_llamacpp.py --llama-bin DIR [--cortiq build/cortiq] [--work /tmp/cortiq-vs-llama]
         [--pairs q8:q8_0,q4:q4_0,q4tp:q4_0,f16:f16] [-p 512] [-n 128] [-r 3] [-t 1,2]
         [--rounds 3] [--out FILE.md]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = "/usr/bin/python3"


def sh(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def prepare(a, work):
    """Writes the checkpoint, the GGUFs and the CMF files once; returns {name: path}."""
    work.mkdir(parents=True, exist_ok=True)
    hf = work / "hf"
    if not (hf / "config.json").exists():
        sh([PY, ROOT / "tests/tools/gen_checkpoint.py", "--preset", "qwen2.5-0.5b", "--tokenizer", "qwen2.5",
            "--seed", "1", "--out", hf], stdout=subprocess.DEVNULL)
    f32 = work / "model-f32.gguf"
    if not f32.exists():
        tmp = work / "model-f32.cmf"
        sh([a.cortiq, "convert", hf, "--quant", "f32", "-o", tmp], stdout=subprocess.DEVNULL)
        sh([a.cortiq, "export-gguf", tmp, "-o", f32], stdout=subprocess.DEVNULL)
        tmp.unlink()
    files = {}
    for cq, gq in a.pairs:
        g = work / f"model-{gq}.gguf"
        if not g.exists():
            sh([Path(a.llama_bin) / "llama-quantize", f32, g, gq.upper()], stdout=subprocess.DEVNULL)
        c = work / f"model-{cq}.cmf"
        if not c.exists():
            sh([a.cortiq, "convert", hf, "--quant", cq, "-o", c], stdout=subprocess.DEVNULL)
        files[("cortiq", cq)] = c
        files[("llama", gq)] = g
    return files


def run_cortiq(a, path, out_json):
    sh([a.cortiq, "bench", path, "-p", a.p, "-n", a.n, "-r", a.r, "-t", a.t, "--json-file", out_json],
       stdout=subprocess.DEVNULL)
    recs = json.loads(Path(out_json).read_text())
    res = {}
    for o in recs:
        test = "pp" if o["n_prompt"] else "tg"
        kern = dict(o.get("dtype_kernel", {}))
        kern["amx"] = "amx " + o.get("amx", "?")
        res[(test, o["n_threads"])] = (o["samples_ts"], kern)
    return res


def run_llama(a, path):
    p = sh([Path(a.llama_bin) / "llama-bench", "-m", path, "-p", a.p, "-n", a.n, "-r", a.r, "-t", a.t,
            "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    res = {}
    for o in json.loads(p.stdout):
        test = "pp" if o["n_prompt"] else "tg"
        res[(test, o["n_threads"])] = (o["samples_ts"], o.get("cpu_info", ""))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--cortiq", default=str(ROOT / "build/cortiq"))
    ap.add_argument("--work", default="/tmp/cortiq-vs-llama")
    ap.add_argument("--pairs", default="q8:q8_0,q4:q4_0,q4tp:q4_0,f16:f16")
    ap.add_argument("-p", default="512")
    ap.add_argument("-n", default="128")
    ap.add_argument("-r", default="3")
    ap.add_argument("-t", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    a.pairs = [tuple(x.split(":")) for x in a.pairs.split(",")]
    work = Path(a.work)
    files = prepare(a, work)
    samples = {}  # (tool, codec, test, threads) -> [tok/s]
    kernels = {}
    loads = []
    for rnd in range(a.rounds):
        loads.append(open("/proc/loadavg").read().split()[0])
        for i, (cq, gq) in enumerate(a.pairs):
            order = ["cortiq", "llama"] if (rnd + i) % 2 == 0 else ["llama", "cortiq"]
            for tool in order:
                if tool == "cortiq":
                    res = run_cortiq(a, files[("cortiq", cq)], work / "last.json")
                    for (test, th), (s, k) in res.items():
                        samples.setdefault(("cortiq", cq, test, th), []).extend(s)
                        kernels[cq] = k
                else:
                    res = run_llama(a, files[("llama", gq)])
                    for (test, th), (s, _) in res.items():
                        samples.setdefault(("llama", gq, test, th), []).extend(s)
    threads = [int(x) for x in a.t.split(",")]
    lines = [f"Cortiq vs llama-bench, medians of {int(a.r) * a.rounds} samples ({a.rounds} interleaved rounds), "
             f"tok/s; load average before each round: {', '.join(loads)}", "",
             "| pair | test | " + " | ".join(f"t={t} Cortiq / llama.cpp (ratio)" for t in threads) + " |",
             "|---|---|" + "---|" * len(threads)]
    for cq, gq in a.pairs:
        for test, name in (("pp", f"pp{a.p}"), ("tg", f"tg{a.n}")):
            cells = []
            for t in threads:
                c = samples.get(("cortiq", cq, test, t))
                l = samples.get(("llama", gq, test, t))
                if not c or not l:
                    cells.append("–")
                    continue
                mc, ml = statistics.median(c), statistics.median(l)
                cells.append(f"{mc:.1f} / {ml:.1f} ({mc / ml:.2f}×)")
            lines.append(f"| {cq} vs {gq.upper()} | {name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Cortiq kernels: " + "; ".join(
        f"{cq}: " + ", ".join(sorted(set(v for v in k.values()))) for cq, k in kernels.items()))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
