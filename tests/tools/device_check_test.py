#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tests of tools/device-check.sh (docs/device-check.md) that need no GPU. One case per run:

  no_gpu       the one-line no-GPU path: with a driver that cannot load, and (where this
               machine has no /dev/nvidia* node) with the defaults; exit 0, nothing else printed
  summary      the summary table (--summary-from) on PASS/FAIL/SKIP mixes, malformed rows and
               empty files, and the verdicts of tools/device_check/device_check.py on made-up
               GoogleTest, kiln run and kiln devices results
  fake_driver  the checks build, devices, conformance and examples against the CUDA fake
               driver of tests/backends/cuda (a stand-in that runs the example kernels on the
               host): the plumbing of a real run, end to end
  ptx          ptxas accepts the busy-wait kernel of the event_timing check (skips without ptxas)

Exit 0 on success, 1 on a failure, 77 when the case cannot run here (ctest: skipped).
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(SOURCE, "tools", "device-check.sh")
HELPER = os.path.join(SOURCE, "tools", "device_check", "device_check.py")
failures = []


def check(condition, what, output=""):
    if not condition:
        failures.append(what)
        print(f"FAIL: {what}\n{output}")
    else:
        print(f"ok: {what}")


def run(args, env=None, timeout=120):
    full_env = dict(os.environ)
    full_env.pop("OUT", None)  # the script's default log folder; never a test's
    full_env.update(env or {})
    p = subprocess.run(args, capture_output=True, text=True, env=full_env, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


# ---- no_gpu ---------------------------------------------------------------------------------
NO_GPU_LINE = re.compile(r"^device-check: no NVIDIA GPU here \((.+)\); nothing to check\n$")


def case_no_gpu(_args):
    driver = "/nonexistent/kiln-device-check/libcuda.so.1"
    rc, out, err = run(["bash", SCRIPT], env={"KILN_DEVICE_CHECK_DRIVER": driver})
    m = NO_GPU_LINE.match(out)
    check(rc == 0, f"an unloadable driver: exit 0 (got {rc})", out + err)
    check(m is not None, "an unloadable driver: exactly the one no-GPU line", out)
    check(m is not None and driver in m.group(1), "the line names the driver and why", out)
    check(err == "", "nothing on stderr", err)
    # The same through --driver, which wins over the environment.
    rc, out, _ = run(["bash", SCRIPT, "--driver", driver], env={"KILN_DEVICE_CHECK_DRIVER": ""})
    check(rc == 0 and NO_GPU_LINE.match(out) is not None, "--driver: the one no-GPU line", out)
    # Nothing is built, unpacked or logged on that path.
    with tempfile.TemporaryDirectory() as tmp:
        logs = os.path.join(tmp, "logs")
        rc, out, _ = run(["bash", SCRIPT, "--driver", driver, "--log-dir", logs,
                          "--build-dir", os.path.join(tmp, "build")])
        check(rc == 0 and not os.path.exists(logs) and not os.path.exists(
            os.path.join(tmp, "build")), "no log folder or build tree made", out)
    if glob.glob("/dev/nvidia[0-9]*"):
        print("skip: the default path (this machine has /dev/nvidia* nodes)")
    else:
        rc, out, err = run(["bash", SCRIPT], env={"KILN_DEVICE_CHECK_DRIVER": ""})
        m = NO_GPU_LINE.match(out)
        check(rc == 0 and m is not None and "/dev/nvidia" in m.group(1),
              "the defaults on this GPU-less machine: the one line naming /dev/nvidia*",
              out + err)
    # Usage errors are errors (2), not a silent pass.
    rc, out, err = run(["bash", SCRIPT, "--driver", driver, "--only", "nosuch"])
    check(rc == 2 and "unknown check 'nosuch'" in err, "--only with an unknown check: exit 2",
          out + err)
    rc, out, err = run(["bash", SCRIPT, "--no-such-flag"])
    check(rc == 2 and "--no-such-flag" in err, "an unknown flag: exit 2", out + err)


# ---- summary --------------------------------------------------------------------------------
def summary(rows_text):
    with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as f:
        f.write(rows_text)
    try:
        return run(["bash", SCRIPT, "--summary-from", f.name])
    finally:
        os.unlink(f.name)


def helper(*args):
    rc, out, err = run([sys.executable, HELPER, *args])
    status, _, detail = out.rstrip("\n").partition("\t")
    return rc, status, detail, err


def write_json(folder, name, value):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        json.dump(value, f)
    return path


def case_summary(_args):
    # The table.
    rc, out, _ = summary("build\tPASS\tused build/\ndevices\tPASS\tcuda:0 H100\n"
                         "tvm_cuda\tSKIP\tno TVM fixtures\n")
    lines = out.splitlines()
    check(rc == 0, f"PASS and SKIP rows: exit 0 (got {rc})", out)
    check(re.match(r"^check +result +detail$", lines[0]) is not None, "a header row", out)
    check(re.match(r"^-+ +------ +------$", lines[1]) is not None, "a rule under it", out)
    check(re.match(r"^tvm_cuda +SKIP +no TVM fixtures$", lines[4]) is not None,
          "rows in columns, in order", out)
    check(lines[-1] == "device-check: PASS: 2 passed, 0 failed, 1 skipped", "the verdict line",
          out)
    rc, out, _ = summary("build\tPASS\tok\nexamples\tFAIL\tvector_add differs (log: x.log)\n"
                         "l2_flush\tSKIP\tnot built\n\n")
    check(rc == 1, f"a FAIL row: exit 1 (got {rc})", out)
    check("examples  FAIL    vector_add differs (log: x.log)" in out, "the failing row", out)
    check(out.splitlines()[-1] == "device-check: FAIL: 1 passed, 1 failed, 1 skipped",
          "a failing verdict line", out)
    rc, out, _ = summary("build\tPASS\tok\nexamples\tOK\tnot a status\n")
    check(rc == 1 and "malformed row: examples" in out, "an unknown status fails", out)
    rc, out, _ = summary("build\tPASS\n")
    check(rc == 1 and "malformed row: build" in out, "a row of two fields fails", out)
    rc, out, _ = summary("\n")
    check(rc == 1 and "no checks ran" in out, "a table with no rows fails", out)
    rc, out, err = run(["bash", SCRIPT, "--summary-from", "/nonexistent/rows.tsv"])
    check(rc == 2 and "cannot read" in err, "an unreadable file: exit 2", out + err)

    with tempfile.TemporaryDirectory() as tmp:
        # GoogleTest verdicts: skip reasons come from the log.
        log = os.path.join(tmp, "g.log")
        with open(log, "w") as f:
            f.write("[ RUN      ] CudaGpu.A\nx.cc:46: Skipped\nno CUDA device: cannot load "
                    "the CUDA driver\n\n[  SKIPPED ] CudaGpu.A (0 ms)\n"
                    "[ RUN      ] CudaPlugin.B\n[       OK ] CudaPlugin.B (0 ms)\n")

        def report(*tests):
            suites = {}
            for name, result, failure in tests:
                suite, test = name.split(".")
                entry = {"name": test, "result": result}
                if failure:
                    entry["failures"] = [{"failure": failure}]
                suites.setdefault(suite, []).append(entry)
            return write_json(tmp, "g.json", {"testsuites": [
                {"name": s, "testsuite": t} for s, t in suites.items()]})

        base = ["gtest", "--label", "kiln_cuda_tests", "--log", log, "--exit-code"]
        j = report(("CudaGpu.A", "SKIPPED", ""), ("CudaPlugin.B", "COMPLETED", ""))
        _, status, detail, _ = helper(*base, "0", "--json", j, "--gpu-suite", "CudaGpu")
        check(status == "FAIL" and "skipped although a GPU is here" in detail
              and "no CUDA device" in detail, "a GPU test skipped for want of a device fails",
              detail)
        _, status, detail, _ = helper(*base, "0", "--json", j)
        check(status == "PASS" and "1 of 2 passed, 1 skipped (CudaGpu.A: no CUDA device" in
              detail, "other skips pass, with the reason", detail)
        j = report(("CudaGpu.A", "COMPLETED", "x.cc:9 Expected equality"),
                   ("CudaPlugin.B", "COMPLETED", ""))
        _, status, detail, _ = helper(*base, "1", "--json", j)
        check(status == "FAIL" and "1 of 2 failed: CudaGpu.A (first: x.cc:9 Expected" in detail,
              "a failed test fails, naming it and its message", detail)
        j = report(("CudaPlugin.B", "COMPLETED", ""))
        _, status, detail, _ = helper(*base, "139", "--json", j)
        check(status == "FAIL" and "exited 139" in detail, "a crash after the tests fails",
              detail)
        _, status, detail, _ = helper(*base, "134", "--json", os.path.join(tmp, "none.json"))
        check(status == "FAIL" and "wrote no report" in detail, "no report fails", detail)
        j = report(("CudaGpu.A", "SKIPPED", ""))
        _, status, detail, _ = helper(*base, "0", "--json", j, "--require-ran",
                                      "--no-device-pattern", "nothing matches this")
        check(status == "SKIP", "--require-ran: all skipped is a SKIP", detail)

        # kiln devices.
        j = write_json(tmp, "d.json", [{"type": "cpu", "devices": [{"device": "cpu:0"}]},
                                       {"type": "cuda", "devices": [], "why_none": "no driver"}])
        _, status, detail, _ = helper("devices", j)
        check(status == "FAIL" and "no driver" in detail, "no cuda device fails with why", detail)
        j = write_json(tmp, "d.json", [{"type": "cuda", "devices": [{"device": "cuda:0",
                       "attributes": {"name": "NVIDIA H100", "arch": "sm_90",
                                      "l2_cache_bytes": 52428800}}]}])
        _, status, detail, _ = helper("devices", j)
        check(status == "PASS" and "cuda:0 NVIDIA H100 (sm_90" in detail, "a cuda device passes",
              detail)
        rc, out, _ = run([sys.executable, HELPER, "l2-bytes", j])
        check(out.strip() == "52428800", "l2-bytes reads the attribute", out)

        # L2 flush: slower when flushed, on device events.
        def run_json(name, median, timer="device", numbers=(1,) * 10, host=None, results=None):
            results = results or [median] * len(numbers)
            return write_json(tmp, name, {"timer": timer, "timing": {
                "median_s": median, "min_s": min(results), "numbers": list(numbers),
                "results_s": results}, "steps_s": {"time": host if host else 2 * sum(
                    n * r for n, r in zip(numbers, results))}})

        hot, cold = run_json("hot.json", 5e-6), run_json("cold.json", 8e-6)
        l2 = ["l2-check", "--bytes", "12582912", "--l2", "52428800"]
        _, status, detail, _ = helper(*l2, "--hot", hot, "--flushed", cold)
        check(status == "PASS" and "1.60x" in detail, "a flushed L2 1.6x slower passes", detail)
        _, status, detail, _ = helper(*l2, "--hot", cold, "--flushed", hot)
        check(status == "FAIL" and "0.6" in detail, "no flush effect fails", detail)
        host = run_json("host.json", 8e-6, timer="host")
        _, status, detail, _ = helper(*l2, "--hot", hot, "--flushed", host)
        check(status == "FAIL" and "host timer" in detail, "a host timer fails", detail)

        # Event timing: 11 calls per run (warm-up + 10); host time = calls x length + 0.2 s.
        def busy(ns, measured, host_extra=0.2, calls=11):
            t = measured * 1e-9
            return f"{ns}=" + run_json(f"busy_{ns}.json", t, numbers=(1,) * (calls - 1),
                                       host=calls * ns * 1e-9 + host_extra)

        good = [busy(100000, 100900), busy(1000000, 1000800), busy(10000000, 10000700)]
        _, status, detail, _ = helper("timing-check", *good)
        check(status == "PASS" and "10 ms -> 10.0007 ms" in detail and "host clock +99.0 ms"
              in detail, "events at the known lengths, host clock agreeing: pass", detail)
        zero = [busy(100000, 200), busy(1000000, 200), busy(10000000, 200)]
        _, status, detail, _ = helper("timing-check", *zero)
        check(status == "FAIL" and "0.1 ms kernel: events read median 0.0002 ms" in detail,
              "events that miss the kernel's length fail", detail)
        drift = [busy(1000000, 1000800), busy(10000000, 10000700, host_extra=0.35)]
        _, status, detail, _ = helper("timing-check", *drift)
        check(status == "FAIL" and "host clock: the timing step grew 249.0 ms" in detail,
              "a host clock that disagrees fails", detail)
        over = [busy(10000000, 10000700, host_extra=-0.05)]
        _, status, detail, _ = helper("timing-check", *over)
        check(status == "FAIL" and "of event time in" in detail,
              "more event time than host time fails", detail)


# ---- fake_driver ----------------------------------------------------------------------------
def case_fake_driver(args):
    if not args.fake_driver or not os.path.exists(args.fake_driver):
        print("skipped: no CUDA fake driver built")
        return 77
    env = {"KILN_DEVICE_CHECK_DRIVER": args.fake_driver, "KILN_LOG": "warn"}
    if args.numpy_python:
        env["KILN_DEVICE_CHECK_PYTHON"] = args.numpy_python
    with tempfile.TemporaryDirectory() as logs:
        rc, out, err = run(["bash", SCRIPT, "--no-build", "--build-dir", args.build_dir,
                            "--log-dir", logs, "--only", "conformance,examples"], env=env,
                           timeout=600)
        rows = {}
        with open(os.path.join(logs, "rows.tsv")) as f:
            for line in f:
                name, status, detail = line.rstrip("\n").split("\t")
                rows[name] = (status, detail)
        check(list(rows) == ["build", "devices", "conformance", "examples"],
              "the rows of build, devices and the two checks asked for", out)
        check(rows["build"][0] == "PASS" and "--no-build" in rows["build"][1],
              "build: the tree as it is", out)
        check(rows["devices"][0] == "PASS" and "Kiln Fake GPU" in rows["devices"][1],
              "devices: the fake GPU", out)
        check(rows["conformance"][0] == "PASS" and re.search(
            r"kiln-conformance [0-9.]+: pass", rows["conformance"][1]) is not None,
            "conformance passes on it", out + err)
        ex_status, ex_detail = rows["examples"]
        if ex_status == "SKIP" and "no Python with numpy" in ex_detail:
            print("note: examples skipped here (no Python with numpy)")
        else:
            check(ex_status == "PASS" and "vector_add bit for bit" in ex_detail and
                  "relu bit for bit" in ex_detail and "matmul max abs diff" in ex_detail,
                  "examples: kiln run outputs equal numpy's", out + err)
        check(rc == 0 and out.splitlines()[-1].startswith("device-check: PASS"),
              f"exit 0 and a passing verdict (got {rc})", out)
        check(os.path.exists(os.path.join(logs, "summary.txt")), "the table is kept as a file")


# ---- ptx ------------------------------------------------------------------------------------
def case_ptx(args):
    if not args.ptxas or not os.path.exists(args.ptxas):
        print("skipped: no ptxas (the CUDA toolkit) to check the PTX with")
        return 77
    ptx = os.path.join(SOURCE, "tools", "device_check", "busy_wait.ptx")
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("sm_80", "sm_90"):
            rc, out, err = run([args.ptxas, f"-arch={arch}", ptx, "-o",
                                os.path.join(tmp, f"{arch}.cubin")])
            check(rc == 0, f"ptxas -arch={arch} busy_wait.ptx", out + err)
    with open(ptx + ".json") as f:
        meta = json.load(f)
    check(meta["kernels"]["busy_wait"]["args"] == ["tensor", "uint64"],
          "the sidecar describes busy_wait(out, ns)", json.dumps(meta))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=["no_gpu", "summary", "fake_driver", "ptx"])
    p.add_argument("--build-dir", default=os.path.join(SOURCE, "build"))
    p.add_argument("--fake-driver", default="")
    p.add_argument("--numpy-python", default="")
    p.add_argument("--ptxas", default="")
    args = p.parse_args()
    code = globals()[f"case_{args.case}"](args)
    if code == 77:
        return 77
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
