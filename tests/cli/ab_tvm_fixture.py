# SPDX-License-Identifier: Apache-2.0
"""Compiles two TVM schedules of one function, 2x apart, for tests/cli/ab_test.py (issue 35):
`work` runs a dependent multiply-add chain over x; once.so walks x once, twice.so walks it twice
(the same loop again), so twice.so does exactly twice the work with the same code per step.
Both export the same symbol, as two builds of one kernel do.

usage: python ab_tvm_fixture.py OUT_DIR   (a Python with apache-tvm)
"""
import os
import sys

import tvm
from tvm.script import tirx as T

N = 1 << 20


@T.prim_func
def once(x: T.Buffer((N,), "float32"), y: T.Buffer((1,), "float32")):
    T.func_attr({"global_symbol": "work", "tir.noalias": True})
    for k in range(N):
        y[0] = y[0] * T.float32(0.999999) + x[k]


@T.prim_func
def twice(x: T.Buffer((N,), "float32"), y: T.Buffer((1,), "float32")):
    T.func_attr({"global_symbol": "work", "tir.noalias": True})
    for k in range(N):
        y[0] = y[0] * T.float32(0.999999) + x[k]
    for k in range(N):
        y[0] = y[0] * T.float32(0.999999) + x[k]


def main(out):
    os.makedirs(out, exist_ok=True)
    for name, func in (("once", once), ("twice", twice)):
        tvm.compile(func, target="llvm").export_library(os.path.join(out, f"{name}.so"))


if __name__ == "__main__":
    main(sys.argv[1])
