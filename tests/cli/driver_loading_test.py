#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A CPU run starts no GPU driver; listing devices still asks every backend.

    driver_loading_test.py KILN RUN_CONFIG

`kiln run` of a config on `cpu` must not load an OpenCL platform (PoCL and its LLVM), HIP/HSA
or the CUDA driver: device attributes are asked of the one backend that runs. The dynamic
loader's own log (LD_DEBUG=files) names every library a process opens. `kiln devices`, which
asks every backend, is the control: where the drivers are installed it loads them, which shows
the check can see them.
"""
import os
import re
import subprocess
import sys

# Libraries of a driver or its runtime, not of the plugins themselves (libkiln_opencl.so links
# the OpenCL ICD loader, libOpenCL.so.1, which opens no platform until asked).
DRIVERS = re.compile(r"file=\S*(libpocl|libLLVM|libclang-cpp|libamdhip64|libhsa-runtime64|"
                     r"libcuda\.so|libnvrtc)\S*")


def loaded_drivers(kiln, *args):
    env = dict(os.environ, LD_DEBUG="files", KILN_LOG="warn")
    proc = subprocess.run([kiln, *args], capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        sys.exit(f"kiln {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return sorted({m.group(0).split("=", 1)[1] for m in DRIVERS.finditer(proc.stderr)})


def main():
    kiln, config = sys.argv[1], sys.argv[2]
    run = loaded_drivers(kiln, "run", config)
    if run:
        sys.exit(f"kiln run on cpu loaded driver libraries: {run}")
    listed = loaded_drivers(kiln, "devices")
    print(f"driver_loading: kiln run on cpu loaded none; kiln devices loaded {listed or 'none'}")


if __name__ == "__main__":
    main()
