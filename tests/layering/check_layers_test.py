#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tools/check_layers.py finds what it is meant to find: each case copies core/ into a
temporary tree, plants one change in a core/src file and runs the checker on that tree.

  edge_call      Tensor::empty(shape, dtype, device) in library code: exit 1, the call named
                 with its file and line.
  explicit_call  the explicit Tensor::empty(shape, dtype, device, context): still clean.
  symbol_cycle   ffi/ calling Module::load(path, runtime), which runtime/ defines although
                 kiln/module.h is ffi's header: exit 1, an import cycle through ffi -> runtime.

Usage: check_layers_test.py REPO
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

PLANTS = {
    "edge_call": ("core/src/eval/time_evaluator.cc", """
namespace kiln {
Tensor planted_scratch(Device device) {
  return Tensor::empty({16}, DataType::Float(32), device);  // PLANTED
}
}  // namespace kiln
"""),
    "explicit_call": ("core/src/eval/time_evaluator.cc", """
namespace kiln {
Tensor planted_scratch(Device device, const DeviceContext& context) {
  return Tensor::empty({16}, DataType::Float(32), device, context);  // PLANTED
}
}  // namespace kiln
"""),
    "symbol_cycle": ("core/src/ffi/module.cc", """
namespace kiln {
Module planted_load(const Runtime& runtime) { return Module::load("x.so", runtime); }  // PLANTED
}  // namespace kiln
"""),
}


def run_case(repo, checker, case):
    rel, text = PLANTS[case]
    with tempfile.TemporaryDirectory(prefix="check_layers_test.") as tmp:
        shutil.copytree(os.path.join(repo, "core"), os.path.join(tmp, "core"))
        path = os.path.join(tmp, rel)
        with open(path, encoding="utf-8") as f:
            before = f.read()
        if not before.endswith("\n"):
            before += "\n"
        line = before.count("\n") + text[:text.index("PLANTED")].count("\n") + 1
        with open(path, "w", encoding="utf-8") as f:
            f.write(before + text)
        p = subprocess.run([sys.executable, checker, tmp], capture_output=True, text=True,
                           timeout=120)
        return p.returncode, p.stdout + p.stderr, f"{rel}:{line}"


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.abspath(argv[0] if argv else os.path.join(here, "..", ".."))
    checker = os.path.join(repo, "tools", "check_layers.py")
    failures = []

    rc, out, where = run_case(repo, checker, "edge_call")
    want = re.escape(f"check_layers: {where} calls the API-edge overload "
                     "Tensor::empty(shape, dtype, device)") + r".*core/src/api_defaults\.cc:\d+"
    if rc != 1 or not re.search(want, out):
        failures.append(f"edge_call: want exit 1 and /{want}/, got exit {rc}:\n{out}")

    rc, out, _ = run_case(repo, checker, "explicit_call")
    if rc != 0:
        failures.append(f"explicit_call: want exit 0 (the explicit form), got exit {rc}:\n{out}")

    rc, out, where = run_case(repo, checker, "symbol_cycle")
    want = (r"import cycle between core folders .*ffi.*runtime.*\n(.*\n)*.*"
            + re.escape(f"ffi -> runtime: {where.split(':')[0][len('core/src/'):]} uses "
                        "Module::load (kiln/module.h; defined in core/src/runtime/"))
    if rc != 1 or not re.search(want, out):
        failures.append(f"symbol_cycle: want exit 1 and /{want}/, got exit {rc}:\n{out}")

    for f in failures:
        print(f"FAIL {f}")
    if not failures:
        print("check_layers_test: edge_call, explicit_call, symbol_cycle passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
