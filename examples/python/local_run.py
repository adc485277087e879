# SPDX-License-Identifier: Apache-2.0
"""Runs and times the example vector add kernel from Python, as a TVM user's test would with
tvm.testing.local_run: export, load, copy the arguments to the device, time, call, copy back.

    PYTHONPATH=build/python python examples/python/local_run.py [build-dir]
"""

import pathlib
import sys

import numpy as np

import kiln
from kiln.testing import EvaluatorConfig, local_run

build = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "build")
module = kiln.load_module(str(build / "examples" / "kernels" / "libvector_add.so"))

n = 1 << 20
a = np.random.default_rng(0).standard_normal(n).astype(np.float32)
b = np.random.default_rng(1).standard_normal(n).astype(np.float32)
out = np.zeros(n, np.float32)

# vector_add(a, b, out, scale): out = a + scale * b
(_, _, result, _), profile = local_run(module, "cpu", [a, b, out, 2.0],
                                       evaluator_config=EvaluatorConfig(number=10, repeat=3))
assert np.array_equal(result, a + 2.0 * b), "wrong numbers"
print(f"vector add of {n} float32 on {kiln.cpu(0)}: outputs match numpy")
print(profile)
