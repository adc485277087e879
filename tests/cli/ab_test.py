# SPDX-License-Identifier: Apache-2.0
"""`kiln ab A.yaml B.yaml` end to end (issue 29 item 2, issue 35 items 3 and 4): the relu example
at two sizes (8x the elements is 8x the work, far beyond any noise) and identical sides (the
same module: named as such, exit 5); each side's module file and SHA-256 (checked against
hashlib); two libraries with the same code (tests/cli/gate_kernel.cc) at 1x and 2x the work; a
side that cannot be told (exit 4, saying which command would decide); the JSON document; a side
whose outputs are wrong; two Runtimes (--plugin-path-b); and bad input, each with its exit code
and message.

    ab_test.py KILN EXAMPLES PLUGIN_DIR CLI_BUILD_DIR
        CLI_BUILD_DIR holds libgate_a.so and libgate_b.so.
    ab_test.py tvm KILN TVM_PYTHON
        Two TVM schedules of one function, 2x apart (tests/cli/ab_tvm_fixture.py, compiled now
        with TVM_PYTHON's apache-tvm): B is slower, A against B faster, each named with its
        file's hash. Exits 77 (skipped, with the reason) without a Python that has TVM.
"""
import hashlib
import json
import os
import shutil
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


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main(kiln, examples, plugin_dir, cli_build):
    examples = os.path.abspath(examples)
    cli_build = os.path.abspath(cli_build)
    relu = os.path.join(examples, "librelu.so")
    ok = True
    with tempfile.TemporaryDirectory() as d:
        def config(name, n, extra="", module=relu):
            return write(d, name, CONFIG.replace("{examples}/librelu.so", module).format(
                n=n, extra=extra))

        small = config("small.yaml", 1 << 14)
        large = config("large.yaml", 1 << 17)
        # One module at two sizes: compared, and the report says they are the same module.
        ok &= expect(kiln, 1, ["A: ", "B: ", f"module {relu}  sha256 {sha256(relu)}",
                               f"A and B are the same module (sha256 {sha256(relu)}); the "
                               "sides differ in: inputs",
                               "10 rounds, A and B in random order per round",
                               "B/A ", "verdict: slower"], "--rounds", "10", small, large)
        ok &= expect(kiln, 0, ["verdict: faster"], "--rounds", "10", large, small)
        # Identical sides: the same module, function and inputs, whatever the noise: named as
        # such, with its own exit code, never "no change".
        same = [f"A and B are the same module (sha256 {sha256(relu)}) with the same function "
                "and inputs: this run timed A against itself", "verdict: same module"]
        ok &= expect(kiln, 5, same, "--rounds", "10", small, small)
        # ... also when B names a byte-identical copy at another path.
        copy = os.path.join(d, "copy_of_relu.so")
        shutil.copyfile(relu, copy)
        ok &= expect(kiln, 5, same + [f"module {copy}  sha256 {sha256(relu)}"], "--rounds", "10",
                     small, config("copy.yaml", 1 << 14, module=copy))

        # Two libraries with the same code (different files: not the same module), B with twice
        # the work: slower, each named with its own hash.
        gate_a = os.path.join(cli_build, "libgate_a.so")
        gate_b = os.path.join(cli_build, "libgate_b.so")
        gate = ("module: {module}\nfunction: spin\ndevice: cpu\n"
                "evaluator: {{number: 1, repeat: 1, min_repeat_ms: 0}}\n"
                "inputs:\n  - {{name: units, scalar: {units}}}\n"
                "  - {{name: parallel, scalar: 0}}\n")
        one = write(d, "gate1.yaml", gate.format(module=gate_a, units=20))
        two = write(d, "gate2.yaml", gate.format(module=gate_b, units=40))
        got, text = ab(kiln, "--rounds", "10", one, two)
        if not (got == 1 and "verdict: slower" in text and sha256(gate_a) != sha256(gate_b)
                and f"module {gate_a}  sha256 {sha256(gate_a)}" in text
                and f"module {gate_b}  sha256 {sha256(gate_b)}" in text
                and "same module" not in text):
            print(f"FAIL: two gate libraries, 2x the work: exit {got}:\n{text}")
            ok = False

        # Could not tell: coin sleeps 1 or 4 ms by the turns of a fixed sequence, so a round's
        # ratio is 4, 1 or 1/4; 6 rounds and no more cannot tell: exit 4, and the command that
        # would decide.
        coin = ("module: {module}\nfunction: coin\ndevice: cpu\n"
                "evaluator: {{number: 1, repeat: 1, min_repeat_ms: 0}}\n"
                "inputs:\n  - {{name: us, scalar: 1000}}\n")
        coin_a = write(d, "coin_a.yaml", coin.format(module=gate_a))
        coin_b = write(d, "coin_b.yaml", coin.format(module=gate_b))
        ok &= expect(kiln, 4, ["verdict: could not tell", "rounds would decide it: kiln ab "
                               f"--max-rounds", f"{coin_a} {coin_b}"],
                     "--rounds", "6", "--max-rounds", "6", "--seed", "3", coin_a, coin_b)

        got, text = ab(kiln, "--json", "--rounds", "8", "--seed", "5", small, large)
        doc = json.loads(text) if got == 1 else {}
        if not (doc.get("verdict") == "slower" and doc.get("seed") == 5
                and len(doc["a"]["seconds"]) == len(doc["b"]["seconds"]) == 8
                and len(doc["a"]["cpu_pressure"]) == 8
                and len(doc["b_first"]) == 8 and doc["low"] > 1
                and doc["low"] <= doc["ratio"] <= doc["high"] and doc["significant"]
                and doc["a"]["function"] == "relu" and doc["b"]["device"] == "cpu:0"
                and doc["a"]["module_sha256"] == sha256(relu) and doc["same_module"]
                and doc["differences"] == ["inputs"] and doc["looks"] == 1):
            print(f"FAIL: --json: exit {got}:\n{text}")
            ok = False
        got, text = ab(kiln, "--json", "--rounds", "8", "--seed", "5", small, large)
        if got != 1 or json.loads(text).get("b_first") != doc.get("b_first"):
            print("FAIL: the same --seed gave another order")
            ok = False

        # B under a second Runtime that loads the plugins from its own folder.
        ok &= expect(kiln, 1, ["verdict: slower", "the sides differ in: inputs, plugins"],
                     "--rounds", "8", "--plugin-path-b", plugin_dir, small, large)

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


TVM_CONFIG = """module: {module}
function: work
device: cpu
evaluator: {{number: 5, repeat: 1, min_repeat_ms: 0}}
inputs:
  - {{name: x, shape: [1048576], dtype: float32, init: random, seed: 3}}
  - {{name: y, shape: [1], dtype: float32, init: zeros}}
"""


def tvm_schedules(kiln, tvm_python):
    """Two TVM libraries with the same symbol, one doing twice the other's work: loaded side by
    side, each runs its own code (the ratio is about 2, never the 1 of a library compared with
    itself), and each is named with its own hash."""
    if not (tvm_python and os.path.exists(tvm_python)) or subprocess.run(
            [tvm_python, "-c", "import tvm"], capture_output=True).returncode != 0:
        print(f"skipped: no Python with apache-tvm (KILN_TVM_PYTHON='{tvm_python}')")
        return 77
    fixture = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ab_tvm_fixture.py")
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([tvm_python, fixture, d], check=True, timeout=600)
        once, twice = os.path.join(d, "once.so"), os.path.join(d, "twice.so")
        a = write(d, "once.yaml", TVM_CONFIG.format(module=once))
        b = write(d, "twice.yaml", TVM_CONFIG.format(module=twice))
        named = [f"module {once}  sha256 {sha256(once)}", f"module {twice}  sha256 {sha256(twice)}"]
        ok = expect(kiln, 1, named + ["verdict: slower"], a, b)
        ok &= expect(kiln, 0, named + ["verdict: faster"], b, a)
        copy = os.path.join(d, "once_copy.so")
        shutil.copyfile(once, copy)
        ok &= expect(kiln, 5, [f"A and B are the same module (sha256 {sha256(once)})",
                               "verdict: same module"],
                     a, write(d, "copy.yaml", TVM_CONFIG.format(module=copy)))
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1] == "tvm":
        sys.exit(tvm_schedules(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""))
    sys.exit(0 if main(*sys.argv[1:5]) else 1)
