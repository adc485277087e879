# SPDX-License-Identifier: Apache-2.0
"""Run by tools/wheel-check.sh inside a minimal Debian 12 root, in a virtual environment that
holds only the repaired kiln-runtime wheel (and numpy, its dependency): the package imports, its
version agrees with its metadata, it lists its plugins, and a local_run of the vector-add
example kernel (copied in beside this script) gives the right numbers on the CPU."""
import importlib.metadata
import os
import sys

import numpy as np

import kiln
import kiln.testing

here = os.path.dirname(os.path.abspath(__file__))
print(f"kiln {kiln.__version__} from {os.path.dirname(kiln.__file__)}")
assert kiln.__version__ == importlib.metadata.version("kiln-runtime"), kiln.__version__
states = {p["name"]: p["state"] for p in kiln.plugins()}
print("plugins:", states)
for name in ("cpu", "package", "cuda"):
    assert states.get(name) == "loaded", (name, states)
kernel = os.path.join(here, "libvector_add.so")
if not os.path.exists(kernel):
    sys.exit(f"{kernel} is missing: build the example kernels first")
n = 1 << 16
a = np.arange(n, dtype="float32")
b = np.full(n, 2, dtype="float32")
out = np.zeros(n, dtype="float32")
mod = kiln.load_module(kernel)
outputs, profile = kiln.testing.local_run(mod, "cpu", [a, b, out, 0.5])
np.testing.assert_array_equal(outputs[2], a + 0.5 * b)
print(f"local_run: vector_add of {n} elements ok, median {profile.median * 1e6:.1f} us")
