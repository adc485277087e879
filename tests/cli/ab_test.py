# SPDX-License-Identifier: Apache-2.0
"""`kiln ab A.yaml B.yaml` end to end (issue 29 item 2): the relu example at two sizes (8x the
elements is 8x the work, far beyond any noise) and identical sides; the JSON document; a side
whose outputs are wrong; two Runtimes (--plugin-path-b); and bad input, each with its exit code
and message.

    ab_test.py KILN EXAMPLES PLUGIN_DIR
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

CONFIG = """module: {examples}/librelu.so
device: cpu
evaluator: {{number: 20, repeat: 1, min_repeat_ms: 0}}
inputs:
  - {{name: in, shape: [{n}], dtype: float32, init: random, seed: 7, low: -1, high: 1}}
  - {{name: out, shape: [{n}], dtype: float32, init: zeros}}
{extra}"""


def write(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def write_npy_float32(path, values):
    """A 1-D float32 .npy file (format 1.0), without numpy."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % len(values)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(f"<{len(values)}f", *values))


def ab(kiln, *args):
    p = subprocess.run([kiln, "ab", "--no-progress", *args], capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout + p.stderr


def expect(kiln, code, needles, *args):
    got, text = ab(kiln, *args)
    ok = got == code and all(n in text for n in needles)
    if not ok:
        print(f"FAIL: kiln ab {' '.join(args)}: exit {got} (expected {code}), expected "
              f"{needles} in:\n{text}")
    return ok


def main(kiln, examples, plugin_dir):
    examples = os.path.abspath(examples)
    ok = True
    with tempfile.TemporaryDirectory() as d:
        def config(name, n, extra=""):
            return write(d, name, CONFIG.format(examples=examples, n=n, extra=extra))

        small = config("small.yaml", 1 << 14)
        large = config("large.yaml", 1 << 17)
        ok &= expect(kiln, 1, ["A: ", "B: ", "10 rounds, A and B in random order per round",
                               "B/A ", "verdict: slower"], "--rounds", "10", small, large)
        ok &= expect(kiln, 0, ["verdict: faster"], "--rounds", "10", large, small)
        # Identical sides: whatever the noise, never "slower" (exit 0).
        ok &= expect(kiln, 0, ["verdict: "], "--rounds", "10", small, small)

        got, text = ab(kiln, "--json", "--rounds", "8", "--seed", "5", small, large)
        doc = json.loads(text) if got == 1 else {}
        if not (doc.get("verdict") == "slower" and doc.get("seed") == 5
                and len(doc["a"]["seconds"]) == len(doc["b"]["seconds"]) == 8
                and len(doc["b_first"]) == 8 and doc["low"] > 1
                and doc["low"] <= doc["ratio"] <= doc["high"] and doc["significant"]
                and doc["a"]["function"] == "relu" and doc["b"]["device"] == "cpu:0"):
            print(f"FAIL: --json: exit {got}:\n{text}")
            ok = False
        got, text = ab(kiln, "--json", "--rounds", "8", "--seed", "5", small, large)
        if got != 1 or json.loads(text).get("b_first") != doc.get("b_first"):
            print("FAIL: the same --seed gave another order")
            ok = False

        # B under a second Runtime that loads the plugins from its own folder.
        ok &= expect(kiln, 1, ["verdict: slower"], "--rounds", "8", "--plugin-path-b",
                     plugin_dir, small, large)

        # A side whose outputs are wrong is not compared (exit 1, saying which).
        write_npy_float32(os.path.join(d, "wrong.npy"), [5.0] * (1 << 14))
        wrong = config("wrong.yaml", 1 << 14,
                       "outputs:\n  - {name: out, expected: wrong.npy}\n")
        ok &= expect(kiln, 1, ["B (", "wrong.yaml) computes wrong results; not compared"],
                     small, wrong)

        # Bad input: exit 2 naming what is wrong.
        sweep = config("sweep.yaml", 1 << 10, "sweep:\n  number: [1, 2]\n")
        ok &= expect(kiln, 2, ["is a sweep; kiln ab compares two single runs"], small, sweep)
        missing = os.path.join(d, "missing.yaml")
        ok &= expect(kiln, 2, ["missing.yaml"], small, missing)
        ok &= expect(kiln, 2, ["--rounds"], "--rounds", "3", small, small)
        ok &= expect(kiln, 2, ["--threshold: expected a percentage"], "--threshold", "x",
                     small, small)
        ok &= expect(kiln, 2, ["no_such_device"], "--device", "no_such_device", small, small)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main(*sys.argv[1:4]) else 1)
