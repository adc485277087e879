#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python half of tools/device-check.sh (docs/device-check.md): the GPU probe and the
verdicts that need parsing or numbers. Each verdict subcommand prints one row body,
`STATUS<TAB>detail`, for the script's summary table; the script decides nothing itself.

Only `examples-check`, `timing-check` (for the kernel's own reading) and `l2-check` need numpy;
the rest runs on any Python 3.
"""
import argparse
import ctypes
import json
import os
import re
import sys


def verdict(status, detail):
    """Prints a row body; the script adds the check's name. Tabs and newlines would break the
    TSV, so they become spaces."""
    detail = re.sub(r"\s+", " ", str(detail)).strip()
    print(f"{status}\t{detail}")
    return 0


# ---------------------------------------------------------------------------------------------
# probe: is there a CUDA device behind the driver library?


def cuda_error_name(lib, code):
    name = ctypes.c_char_p()
    try:
        if lib.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
            return name.value.decode()
    except AttributeError:
        pass
    return "CUresult"


def probe(args):
    """Prints nothing and exits 0 when `driver` loads, initialises and reports a device; else
    prints the reason and exits 3."""
    try:
        lib = ctypes.CDLL(args.driver)
    except OSError as err:
        print(f"cannot load the CUDA driver {args.driver}: {err}")
        return 3
    try:
        rc = lib.cuInit(0)
    except AttributeError:
        print(f"{args.driver} is not a CUDA driver (no cuInit)")
        return 3
    if rc != 0:
        print(f"cuInit failed in {args.driver}: {cuda_error_name(lib, rc)} ({rc})")
        return 3
    count = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0:
        print(f"cuDeviceGetCount failed in {args.driver}: {cuda_error_name(lib, rc)} ({rc})")
        return 3
    if count.value == 0:
        print(f"the CUDA driver {args.driver} reports no devices")
        return 3
    return 0


def nvrtc(_args):
    """Exit 0 when an NVRTC library loads from where the cuda plugin looks by default
    (docs/backends/cuda.md, option nvrtc_library), else 3."""
    names = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            names += [os.path.join(root, sub, "libnvrtc.so") for sub in ("lib64", "lib")]
    for name in names:
        try:
            ctypes.CDLL(name)
            return 0
        except OSError:
            continue
    return 3


# ---------------------------------------------------------------------------------------------
# devices: what `kiln devices --json` says about the cuda type


def cuda_entry(path):
    with open(path) as f:
        entries = json.load(f)
    for entry in entries:
        if entry.get("type") == "cuda":
            return entry
    return None


def devices(args):
    entry = cuda_entry(args.json)
    if entry is None:
        return verdict("FAIL", "kiln devices lists no cuda device type (is the cuda plugin in "
                               "the plugin set?)")
    if not entry.get("devices"):
        return verdict("FAIL", f"kiln sees no cuda device: {entry.get('why_none', '')}")
    parts = []
    for d in entry["devices"]:
        a = d.get("attributes", {})
        gib = a.get("memory_bytes", 0) / 2**30
        l2 = a.get("l2_cache_bytes", 0) / 2**20
        parts.append(f"{d.get('device')} {a.get('name', '?')} ({a.get('arch', '?')}, "
                     f"{a.get('compute_units', '?')} SMs, {gib:.1f} GiB, L2 {l2:.0f} MiB, "
                     f"driver {a.get('driver_version', '?')})")
    return verdict("PASS", "; ".join(parts))


def l2_bytes(args):
    """Prints cuda:0's l2_cache_bytes (0 when the attribute is missing)."""
    entry = cuda_entry(args.json)
    attrs = entry["devices"][0].get("attributes", {}) if entry and entry.get("devices") else {}
    print(int(attrs.get("l2_cache_bytes", 0)))
    return 0


# ---------------------------------------------------------------------------------------------
# gtest: a GoogleTest binary's JSON report plus its log (skip reasons are only in the log)

RESULT_LINE = re.compile(r"^\[\s+(OK|FAILED|SKIPPED)\s+\] (\S+)\.(\S+)(?: \(\d+ ms\))?$")


def skip_reasons(log_text):
    """Test name -> the message GTEST_SKIP printed (the lines between 'Skipped' and the
    [  SKIPPED ] line)."""
    reasons = {}
    current, lines, in_skip = None, [], False
    for line in log_text.splitlines():
        m = re.match(r"^\[ RUN      \] (\S+)$", line)
        if m:
            current, lines, in_skip = m.group(1), [], False
            continue
        if current and re.search(r": Skipped$", line):
            in_skip = True
            continue
        if current and line.startswith("[  SKIPPED ]"):
            reasons[current] = " ".join(x.strip() for x in lines if x.strip())
            current, in_skip = None, False
            continue
        if current and in_skip:
            lines.append(line)
    return reasons


def gtest(args):
    """Verdict on a GoogleTest run: FAIL when a test failed, the binary crashed, nothing ran,
    or a test of --gpu-suite skipped for want of a device (a GPU is here: it must run)."""
    log_text = open(args.log, errors="replace").read() if os.path.exists(args.log) else ""
    if not os.path.exists(args.json):
        return verdict("FAIL", f"{args.label} wrote no report (exit {args.exit_code}; crashed?)")
    with open(args.json) as f:
        report = json.load(f)
    tests, failed, skipped, first_failure = [], [], [], ""
    for suite in report.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = f"{suite['name']}.{t['name']}"
            tests.append(name)
            if t.get("failures"):
                failed.append(name)
                if not first_failure:
                    first_failure = t["failures"][0].get("failure", "")
            elif t.get("result") == "SKIPPED":
                skipped.append(name)
    if not tests:
        return verdict("FAIL", f"{args.label}: no tests ran (filter {args.filter!r})")
    if failed:
        shown = ", ".join(failed[:6]) + (" ..." if len(failed) > 6 else "")
        message = re.sub(r"\s+", " ", first_failure).strip()
        message = message[:240] + ("..." if len(message) > 240 else "")
        return verdict("FAIL", f"{args.label}: {len(failed)} of {len(tests)} failed: {shown}"
                               f" (first: {message})")
    if args.exit_code != 0:
        return verdict("FAIL", f"{args.label} exited {args.exit_code} with no failed test "
                               "(a crash after the tests?)")
    reasons = skip_reasons(log_text)
    no_device = re.compile(args.no_device_pattern)
    blind = [s for s in skipped
             if s.split(".")[0] in args.gpu_suite and no_device.search(reasons.get(s, ""))]
    if blind:
        return verdict("FAIL", f"{args.label}: {len(blind)} GPU tests skipped although a GPU is "
                               f"here: {blind[0]}: {reasons.get(blind[0], '')}")
    if args.require_ran and len(skipped) == len(tests):
        why = reasons.get(skipped[0], "")
        return verdict("SKIP", f"{args.label}: {skipped[0]}: {why}")
    detail = f"{args.label}: {len(tests) - len(skipped)} of {len(tests)} passed"
    if skipped:
        detail += f", {len(skipped)} skipped ({skipped[0]}: {reasons.get(skipped[0], '?')})"
    return verdict("PASS", detail)


# ---------------------------------------------------------------------------------------------
# examples: the CUDA run configs with every tensor saved, checked against numpy

INPUT_LINE = re.compile(r"^\s*-\s*\{\s*name:\s*([A-Za-z_][A-Za-z0-9_]*)\s*,\s*(shape|scalar):\s*"
                        r"([^,}]+)")


def config_inputs(text):
    """(tensor names, scalar name -> value text) of a run config's flow-style inputs."""
    tensors, scalars = [], {}
    for line in text.splitlines():
        m = INPUT_LINE.match(line)
        if m:
            if m.group(2) == "shape":
                tensors.append(m.group(1))
            else:
                scalars[m.group(1)] = m.group(3).strip()
    return tensors, scalars


def examples_config(args):
    """Writes `out`: the run config `src` plus an outputs section saving every tensor input to
    <kernel>.<name>.npy beside it."""
    text = open(args.src).read()
    if re.search(r"^outputs:", text, re.M):
        print(f"{args.src} already has an outputs section", file=sys.stderr)
        return 2
    tensors, _ = config_inputs(text)
    if not tensors:
        print(f"{args.src}: no tensor inputs found", file=sys.stderr)
        return 2
    lines = [f"# {args.src} with every tensor saved (tools/device-check.sh examples)"]
    lines += [text.rstrip("\n"), "outputs:"]
    lines += [f"  - {{name: {t}, save: {args.kernel}.{t}.npy}}" for t in tensors]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


def expected_output(kernel, arrays, scalars, np):
    """(output name, what numpy says it must hold, rtol, atol) for one example kernel."""
    if kernel == "vector_add":
        alpha = np.float32(float(scalars["alpha"]))
        # The kernel rounds the product, then the sum (no fused multiply-add): bit for bit.
        return "out", arrays["a"] + alpha * arrays["b"], 0.0, 0.0
    if kernel == "relu":
        return "out", np.maximum(arrays["in"], np.float32(0)), 0.0, 0.0
    if kernel == "matmul":
        ref = arrays["a"].astype(np.float64) @ arrays["b"].astype(np.float64)
        return "c", ref, 1e-4, 1e-4  # float32 sums of 256 products against float64
    raise ValueError(f"no numpy reference for kernel {kernel}")


def examples_check(args):
    import numpy as np

    results, failed = [], []
    for kernel in args.kernels:
        cfg = os.path.join(args.dir, f"cuda_{kernel}.yaml")
        tensors, scalars = config_inputs(open(cfg).read())
        arrays = {t: np.load(os.path.join(args.dir, f"{kernel}.{t}.npy")) for t in tensors}
        name, want, rtol, atol = expected_output(kernel, arrays, scalars, np)
        got = arrays[name]
        run = json.load(open(os.path.join(args.dir, f"{kernel}.json")))
        median_us = run.get("timing", {}).get("median_s", float("nan")) * 1e6
        if got.shape != want.shape:
            failed.append(f"{kernel}: {name} has shape {got.shape}, numpy {want.shape}")
            continue
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        bad = diff > atol + rtol * np.abs(want.astype(np.float64))
        if bad.any():
            i = np.unravel_index(int(np.argmax(diff)), diff.shape)
            failed.append(f"{kernel}: {int(bad.sum())} of {got.size} elements of {name} differ "
                          f"from numpy (max abs diff {diff.max():.3g} at {list(i)})")
            continue
        how = "bit for bit" if rtol == 0 and atol == 0 else f"max abs diff {diff.max():.2g}"
        results.append(f"{kernel} {how} ({median_us:.1f} us)")
    if failed:
        return verdict("FAIL", "; ".join(failed))
    return verdict("PASS", "equal to numpy: " + ", ".join(results))


# ---------------------------------------------------------------------------------------------
# tvm-config: a run config for one of TVM's CUDA fixtures (tests/tvm/make_fixtures.py), its
# last argument checked against the fixture's numpy reference


def tvm_config(args):
    with open(os.path.join(args.fixtures, "manifest.json")) as f:
        case = json.load(f)["cases"][args.case]
    names = [f"arg{i}" for i in range(len(case["inputs"]))]
    rtol = case.get("rtol", 1e-5)
    lines = [f"# {args.case}: compiled by apache-tvm for CUDA (tools/device-check.sh tvm_cuda)",
             f"module: {os.path.join(args.fixtures, case['library'])}",
             f"function: {case['function']}",
             "device: cuda",
             "evaluator: {number: 2, repeat: 2, min_repeat_ms: 0}",
             "inputs:"]
    lines += [f"  - {{name: {n}, npy: {os.path.join(args.fixtures, f)}}}"
              for n, f in zip(names, case["inputs"])]
    lines += ["outputs:",
              f"  - {{name: {names[-1]}, expected: "
              f"{os.path.join(args.fixtures, case['outputs'][0])}, rtol: {rtol}, atol: 1e-5}}"]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


# ---------------------------------------------------------------------------------------------
# l2-check: a flushed L2 must make the vector add slower than a hot one


def l2_check(args):
    hot = json.load(open(args.hot))
    flushed = json.load(open(args.flushed))
    for name, run in (("hot", hot), ("flushed", flushed)):
        if run.get("timer") != "device":
            return verdict("FAIL", f"the {name} run used the {run.get('timer')} timer, not CUDA "
                                   "events")
    h = hot["timing"]["median_s"]
    f = flushed["timing"]["median_s"]
    if not (h > 0 and f > 0):
        return verdict("FAIL", f"a median is not positive: hot {h} s, flushed {f} s")
    ratio = f / h
    detail = (f"vector add of {args.bytes / 2**20:.1f} MiB (L2 {args.l2 / 2**20:.0f} MiB): "
              f"flushed {f * 1e6:.2f} us vs hot {h * 1e6:.2f} us per call, {ratio:.2f}x "
              f"(needs >= {args.min_ratio:.2f}x)")
    return verdict("PASS" if ratio >= args.min_ratio else "FAIL", detail)


# ---------------------------------------------------------------------------------------------
# timing-check: CUDA events around kernels of known length, and the host clock around them


def timing_check(args):
    """args.runs: LENGTH_NS=RUN_JSON pairs (kernel length, `kiln run --json` of it), shortest
    first. Each median must be the length (events agree with %globaltimer); the host time of
    the timing step must grow between the two longest runs by the kernel time added (the host
    clock agrees with both); device time never exceeds the host time around it."""
    runs = []
    for item in args.runs:
        ns, path = item.split("=", 1)
        runs.append((int(ns), json.load(open(path)), path))
    problems, shown = [], []
    for ns, run, path in runs:
        t = ns * 1e-9
        timing = run.get("timing", {})
        if run.get("timer") != "device":
            problems.append(f"{t * 1e3:g} ms kernel: timer {run.get('timer')}, not CUDA events")
            continue
        med, lo = timing.get("median_s", 0.0), timing.get("min_s", 0.0)
        calls = 1 + sum(timing.get("numbers", []))  # the evaluator's warm-up call, then batches
        device_total = sum(n * r for n, r in zip(timing.get("numbers", []),
                                                 timing.get("results_s", [])))
        host = run.get("steps_s", {}).get("time", 0.0)
        low_ok = lo >= 0.99 * t - 2e-6
        high_ok = med <= 1.02 * t + 20e-6
        if not (low_ok and high_ok):
            problems.append(f"{t * 1e3:g} ms kernel: events read median {med * 1e3:.4f} ms, "
                            f"min {lo * 1e3:.4f} ms (allowed {0.99 * t * 1e3:.4f} .. "
                            f"{(1.02 * t + 20e-6) * 1e3:.4f} ms)")
        if device_total > host * 1.001:
            problems.append(f"{t * 1e3:g} ms kernel: {device_total * 1e3:.3f} ms of event time "
                            f"in {host * 1e3:.3f} ms of host time")
        if args.npy:
            seen = kernel_reading(path)
            if seen is not None and seen < ns:
                problems.append(f"{t * 1e3:g} ms kernel: it saw only {seen} ns pass")
        shown.append((t, med, calls, host))
    if len(shown) >= 2:
        (t1, _, c1, h1), (t2, _, c2, h2) = shown[-2], shown[-1]
        if c1 != c2:
            problems.append(f"the two longest runs made {c1} and {c2} calls; expected equal")
        else:
            want = c2 * (t2 - t1)
            grew = h2 - h1
            if abs(grew - want) > 0.1 * want + 5e-3:
                problems.append(f"host clock: the timing step grew {grew * 1e3:.1f} ms for "
                                f"{want * 1e3:.1f} ms more kernel time ({c2} calls)")
    summary = ", ".join(f"{t * 1e3:g} ms -> {m * 1e3:.4f} ms" for t, m, _, _ in shown)
    if len(shown) >= 2:
        (t1, _, c1, h1), (t2, _, c2, h2) = shown[-2], shown[-1]
        summary += (f"; host clock +{(h2 - h1) * 1e3:.1f} ms for +{c2 * (t2 - t1) * 1e3:.1f} ms "
                    "of kernel time")
    if problems:
        return verdict("FAIL", "; ".join(problems) + f" [events: {summary}]")
    return verdict("PASS", f"events: {summary}")


def kernel_reading(run_json_path):
    """out[0] of the busy-wait kernel (the nanoseconds it saw), saved beside its run JSON."""
    npy = run_json_path[:-len(".json")] + ".out.npy"
    if not os.path.exists(npy):
        return None
    try:
        import numpy as np
    except ImportError:
        return None
    return int(np.load(npy).reshape(-1)[0])


# ---------------------------------------------------------------------------------------------


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("probe", help="exit 0 when DRIVER has a CUDA device, else 3 and why")
    s.add_argument("driver")
    s.set_defaults(run=probe)

    s = sub.add_parser("nvrtc", help="exit 0 when an NVRTC library loads, else 3")
    s.set_defaults(run=nvrtc)

    s = sub.add_parser("tvm-config", help="a run config for a TVM CUDA fixture")
    s.add_argument("--fixtures", required=True)
    s.add_argument("--case", required=True)
    s.add_argument("out")
    s.set_defaults(run=tvm_config)

    s = sub.add_parser("devices", help="verdict on `kiln devices --json`")
    s.add_argument("json")
    s.set_defaults(run=devices)

    s = sub.add_parser("l2-bytes", help="cuda:0's l2_cache_bytes from `kiln devices --json`")
    s.add_argument("json")
    s.set_defaults(run=l2_bytes)

    s = sub.add_parser("gtest", help="verdict on a GoogleTest run")
    s.add_argument("--label", required=True)
    s.add_argument("--log", required=True)
    s.add_argument("--json", required=True)
    s.add_argument("--exit-code", type=int, required=True)
    s.add_argument("--filter", default="*")
    s.add_argument("--gpu-suite", action="append", default=[],
                   help="suite whose tests must not skip for want of a device")
    s.add_argument("--no-device-pattern", default=r"no CUDA device|needs a CUDA device")
    s.add_argument("--require-ran", action="store_true",
                   help="SKIP (not PASS) when every test skipped")
    s.set_defaults(run=gtest)

    s = sub.add_parser("examples-config", help="a run config that saves every tensor")
    s.add_argument("--kernel", required=True)
    s.add_argument("src")
    s.add_argument("out")
    s.set_defaults(run=examples_config)

    s = sub.add_parser("examples-check", help="verdict: saved outputs against numpy")
    s.add_argument("--dir", required=True)
    s.add_argument("kernels", nargs="+")
    s.set_defaults(run=examples_check)

    s = sub.add_parser("l2-check", help="verdict: flushed vs hot vector add")
    s.add_argument("--hot", required=True)
    s.add_argument("--flushed", required=True)
    s.add_argument("--bytes", type=float, required=True)
    s.add_argument("--l2", type=float, required=True)
    s.add_argument("--min-ratio", type=float, default=1.1)
    s.set_defaults(run=l2_check)

    s = sub.add_parser("timing-check", help="verdict: events and host clock vs known lengths")
    s.add_argument("--npy", action="store_true", help="also read the kernel's own reading")
    s.add_argument("runs", nargs="+", metavar="NS=RUN_JSON")
    s.set_defaults(run=timing_check)

    args = p.parse_args()
    try:
        return args.run(args)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as err:
        if args.command in ("probe", "nvrtc", "examples-config", "tvm-config", "l2-bytes"):
            raise
        return verdict("FAIL", f"cannot read the results: {type(err).__name__}: {err}")


if __name__ == "__main__":
    sys.exit(main())
