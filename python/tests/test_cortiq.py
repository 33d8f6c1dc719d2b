"""The Python binding (python/cortiq) against what the CLI answered for the same file.

Usage: CORTIQ_LIBRARY=.../libcortiq.so /usr/bin/python3 test_cortiq.py FIXTURE_DIR
(FIXTURE_DIR made by tests/capi/prepare.sh; ctest's capi.python sets both)."""

import json
import os
import re
import sys
import unittest

import cortiq

FIX = sys.argv.pop(1) if len(sys.argv) > 1 else os.environ.get("CORTIQ_FIXTURE", "")


def read(name):
    with open(os.path.join(FIX, name), encoding="utf-8") as f:
        return f.read()


class BindingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = cortiq.Model(os.path.join(FIX, "s.cmf"), threads=1)

    @classmethod
    def tearDownClass(cls):
        cls.m.close()

    def test_tokenize_equals_cli(self):
        self.assertEqual(self.m.tokenize("Once upon a time, Lily"), json.loads(read("ids.txt")))
        ids = self.m.tokenize("Once upon a time, Lily", "plain")
        self.assertEqual(self.m.detokenize(ids), "Once upon a time, Lily")

    def test_generate_streams_the_cli_greedy_text(self):
        pieces = list(self.m.generate("Once upon a time", max_tokens=40, greedy=True))
        self.assertGreater(len(pieces), 1)
        self.assertEqual("".join(pieces) + "\n", read("greedy.txt"))
        self.assertEqual(self.m.last_finish, "max_tokens")

    def test_leaving_the_loop_cancels(self):
        got = []
        for piece in self.m.generate("Once upon a time", max_tokens=40, greedy=True):
            got.append(piece)
            if len(got) == 2:
                break
        self.assertEqual(len(got), 2)
        self.assertEqual(self.m.last_finish, "cancelled")
        self.assertLessEqual(self.m.last_generated_tokens, 40)  # the engine may have run ahead
        # the context is free again
        self.assertEqual("".join(self.m.generate("Once upon a time", max_tokens=40, greedy=True)) + "\n",
                         read("greedy.txt"))

    def test_stop_string_cuts_the_text(self):
        full = read("greedy.txt")[:-1]
        word = full.split()[3]
        text = "".join(self.m.generate("Once upon a time", max_tokens=40, greedy=True, stop=[word]))
        self.assertEqual(text, full[: full.index(word)])
        self.assertEqual(self.m.last_finish, "stop")

    def test_chat_renders_the_cli_template(self):
        msgs = json.loads(read("msgs.json"))
        self.assertEqual(self.m.render_chat(msgs), read("chat.txt"))
        text = "".join(self.m.chat(msgs, max_tokens=8, greedy=True))
        ids = self.m.tokenize(read("chat.txt"), "plain")
        self.assertEqual(text, "".join(self.m.generate(ids, max_tokens=8, greedy=True)))

    def test_ppl_equals_cli_prefix_mode(self):
        want = float(re.search(r"Final estimate: PPL = ([0-9.]+)", read("ppl.out")).group(1))
        self.assertAlmostEqual(self.m.ppl(read("ppl.txt")), want, places=4)

    def test_logits_argmax_is_the_greedy_token(self):
        ids = self.m.tokenize("Once upon a time", "prompt")
        last = self.m.logits(ids)
        rows = self.m.logits(ids, all_positions=True)
        self.assertEqual(len(rows), len(ids))
        self.assertEqual(rows[-1], last)
        best = max(range(len(last)), key=lambda i: (last[i], i))
        first = "".join(self.m.generate(ids, max_tokens=1, greedy=True))
        self.assertEqual(self.m.detokenize(ids + [best])[len(self.m.detokenize(ids)):], first)

    def test_embed_is_the_normalized_post_norm_state(self):
        ids = self.m.tokenize("Once upon a time", "prompt")
        raw = self.m.embed(ids, normalize=False)
        unit = self.m.embed(ids)
        n = sum(x * x for x in raw) ** 0.5
        self.assertGreater(n, 1e-3)
        self.assertAlmostEqual(sum(x * x for x in unit), 1.0, places=5)
        self.assertLess(max(abs(u - r / n) for u, r in zip(unit, raw)), 1e-6)
        # causal: the mean of the normed states is the mean of each prefix's last normed state
        prefixes = [self.m.embed(ids[:k], "last", normalize=False) for k in range(1, len(ids) + 1)]
        mean = [sum(col) / len(ids) for col in zip(*prefixes)]
        self.assertLess(max(abs(a - b) for a, b in zip(mean, raw)), 1e-4)

    def test_errors_are_exceptions(self):
        with self.assertRaises(cortiq.CortiqError) as e:
            cortiq.Model(os.path.join(FIX, "missing.cmf"))
        self.assertEqual(e.exception.code, -3)
        with self.assertRaises(cortiq.CortiqError):
            cortiq.Model(os.path.join(FIX, "s.cmf"), task="nosuch")


if __name__ == "__main__":
    unittest.main()
