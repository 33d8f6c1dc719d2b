#!/usr/bin/python3
"""Independent oracle for the q4tp/q2tp ladder and step rule (FORMAT-NOTES §1.8).

Writes tests/golden/quant/ladder.txt, read by src/quant/ladder_test.cc. Arithmetic is numpy
float32 (IEEE, no fused multiply-add); exp2 is computed in float64 by Python's math.exp2 and then
rounded to float32 (the correctly rounded value of 2^x for the test inputs).

Line formats (all numbers are hex bit patterns):
  L <lo f16> <step f16> <t[0] f32> ... <t[31] f32>        q4tp ladder
  S <lo_r f32> <hi f32> <intervals dec> <stored step f16> <bumps dec>
"""
import math
import os
import random

import numpy as np


def f16_bits_to_f32(b):
    return np.array([b], dtype=np.uint16).view(np.float16)[0].astype(np.float32)


def f32_bits(x):
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def exp2f(x):
    return np.float32(math.exp2(float(x)))


def ladder(lo_b, st_b):
    t = [exp2f(f16_bits_to_f32(lo_b))]
    ratio = exp2f(f16_bits_to_f32(st_b))
    for _ in range(31):
        t.append(np.float32(t[-1] * ratio))
    return t


def step(lo_r, hi, intervals):
    lo_r, hi = np.float32(lo_r), np.float32(hi)
    k = np.float32(intervals)
    st_b = int(np.array([np.float32((hi - lo_r) / k)], dtype=np.float32).astype(np.float16).view(np.uint16)[0])
    bumps = 0
    for _ in range(64):
        st = f16_bits_to_f32(st_b)
        if st > 0 and np.float32(lo_r + np.float32(k * st)) >= hi:
            break
        st_b = (st_b + 1) & 0xFFFF
        bumps += 1
    return st_b, bumps


def f16_of(x):
    return int(np.array([x], dtype=np.float32).astype(np.float16).view(np.uint16)[0])


def main():
    rng = random.Random(20240601)
    lines = []
    cases = [(f16_of(-14.0), 0x0000), (f16_of(-3.0), f16_of(0.25)), (f16_of(-7.3), f16_of(0.137)),
             (f16_of(0.0), 0x0001), (f16_of(5.5), f16_of(0.31))]
    for _ in range(20):
        lo = rng.uniform(-14.0, 3.0)
        st = rng.uniform(0.0, 0.6)
        cases.append((f16_of(lo), f16_of(st)))
    for lo_b, st_b in cases:
        t = ladder(lo_b, st_b)
        lines.append("L %04x %04x " % (lo_b, st_b) + " ".join("%08x" % f32_bits(v) for v in t))
    steps = [(-3.0, -3.0, 31), (-3.0, 2.0, 31), (-3.0, 2.0, 30), (-10.5, -2.123, 31)]
    # hi below lo_r: a negative step never satisfies the rule; 64 bumps, result stays negative.
    steps.append((-3.0, -3.001, 31))
    for _ in range(40):
        lo_r = float(f16_bits_to_f32(f16_of(rng.uniform(-14.0, 0.0))))
        hi = np.float32(lo_r + rng.uniform(0.0, 12.0))
        steps.append((lo_r, float(hi), rng.choice([30, 31])))
    for lo_r, hi, k in steps:
        st_b, bumps = step(lo_r, hi, k)
        lines.append("S %08x %08x %d %04x %d" % (f32_bits(lo_r), f32_bits(hi), k, st_b, bumps))
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "quant", "ladder.txt")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    nb = sum(1 for l in lines if l.startswith("S") and int(l.split()[5]) > 0)
    print("wrote", out, len(lines), "lines,", nb, "step cases with bumps")


if __name__ == "__main__":
    main()
