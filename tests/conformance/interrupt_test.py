#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kiln-conformance stopped while a test hangs in its worker process.

    interrupt_test.py TOOL WORK_DIR ARGS...

ARGS select a device whose module test hangs when KILN_TEST_PLUGIN_HANG=1 (the stub_crash
plugin, tests/plugins). SIGINT or SIGTERM on the tool kills the worker, writes both reports
with what ended (the run marked interrupted) and exits with 128 + the signal. SIGKILL on the
tool, which it cannot catch, still takes the worker with it (PR_SET_PDEATHSIG). Either way no
worker is left running.
"""
import json
import os
import signal
import subprocess
import sys
import time
import unittest

TOOL = ""
WORK = ""
ARGS = []
HUNG_TEST = "LoadsModuleAndLaunchesKernel"


def children_of(pid):
    """The pids whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def running(pid):
    """Whether `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Interrupted(unittest.TestCase):
    def start(self, name):
        """Starts the tool with the hanging plugin; returns (process, worker pid, output path)
        once the worker runs the hanging test."""
        folder = os.path.join(WORK, name)
        subprocess.run(["rm", "-rf", folder], check=True)
        os.makedirs(folder)
        self.report = os.path.join(folder, "report.md")
        self.json = os.path.join(folder, "report.json")
        output = os.path.join(folder, "output.txt")
        env = dict(os.environ, KILN_TEST_PLUGIN_HANG="1")
        with open(output, "wb") as out:
            tool = subprocess.Popen(
                # Only a test that passes before the hanging one: no failure decides the verdict.
                [TOOL, *ARGS, "--test-timeout", "0", "--report", self.report,
                 "--report-json", self.json,
                 f"--gtest_filter=*.EnumeratesDevicesWithAttributes:*.{HUNG_TEST}"],
                stdout=out, stderr=subprocess.STDOUT, env=env)
        self.addCleanup(self.kill_all, tool)
        deadline = time.monotonic() + 60
        while True:
            with open(output, encoding="utf-8", errors="replace") as f:
                text = f.read()
            if f"RUN      ] DeviceConformance/stub_crash.{HUNG_TEST}" in text:
                break
            self.assertIsNone(tool.poll(), f"the tool ended before the hanging test:\n{text}")
            self.assertLess(time.monotonic(), deadline, f"the hanging test never started:\n{text}")
            time.sleep(0.05)
        workers = children_of(tool.pid)
        self.assertEqual(len(workers), 1, f"expected one worker process, found {workers}")
        self.workers = workers
        return tool, workers[0], output

    def kill_all(self, tool):
        """Leaves nothing behind when an assertion failed half-way."""
        for pid in getattr(self, "workers", []):
            if running(pid):
                os.killpg(pid, signal.SIGKILL)
        if tool.poll() is None:
            tool.kill()
            tool.wait()

    def wait_gone(self, pid):
        deadline = time.monotonic() + 30
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse(running(pid), f"worker {pid} is still running")

    def test_sigint_and_sigterm_kill_the_worker_and_write_the_reports(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            with self.subTest(signal=sig.name):
                tool, worker, output = self.start(sig.name)
                tool.send_signal(sig)
                rc = tool.wait(timeout=60)
                with open(output, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                self.assertEqual(rc, 128 + sig, text)
                self.wait_gone(worker)
                self.assertIn(f"interrupted by {sig.name}", text)
                with open(self.report, encoding="utf-8") as f:
                    report = f.read()
                self.assertIn(f"**Interrupted by {sig.name}**", report)
                self.assertIn("| EnumeratesDevicesWithAttributes | pass |", report)
                self.assertNotIn(f"| {HUNG_TEST} |", report)
                with open(self.json, encoding="utf-8") as f:
                    doc = json.load(f)
                self.assertEqual(doc["summary"]["verdict"], "interrupted")
                self.assertEqual(doc["interrupted_by"], sig.name)
                names = [t["name"] for t in doc["targets"][0]["tests"]]
                self.assertIn("EnumeratesDevicesWithAttributes", names)

    def test_sigkill_on_the_tool_takes_the_worker_with_it(self):
        tool, worker, _ = self.start("SIGKILL")
        tool.kill()
        self.assertEqual(tool.wait(timeout=60), -signal.SIGKILL)
        self.wait_gone(worker)


if __name__ == "__main__":
    TOOL, WORK, ARGS = sys.argv[1], sys.argv[2], sys.argv[3:]
    unittest.main(argv=[sys.argv[0]])
