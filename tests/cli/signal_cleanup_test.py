#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`kiln run` and its temporary directories when the run is interrupted, and its progress line.

    signal_cleanup_test.py KILN EXAMPLES_DIR

A real ^C typed into a pseudo-terminal (the terminal sends SIGINT to the foreground process
group, as for a person at a shell) and a SIGTERM each end a long run, which must leave no
kiln_* directory in its $TMPDIR and die of that signal. A later run removes the directories that
earlier runs left behind (marked, unlocked, this user's) and keeps every other one: a marked
directory whose lock a live process holds, an unmarked one, a link. On a terminal the progress
is a redrawn line with elapsed time and an ETA; in a pipe there is none unless forced, and then
plain lines.
"""
import fcntl
import os
import pty
import select
import signal
import subprocess
import sys
import tempfile
import time
import unittest

KILN = ""
EXAMPLES = ""
MARKER = ".kiln_temp_owner"


def write_config(folder, name, repeat, min_repeat_ms):
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"module: {EXAMPLES}/librelu.so\n"
                f"evaluator: {{number: 1, repeat: {repeat}, min_repeat_ms: {min_repeat_ms}}}\n"
                "inputs:\n"
                "  - {name: in, shape: [65536], dtype: float32, init: random}\n"
                "  - {name: out, shape: [65536], dtype: float32}\n")
    return path


def kiln_entries(folder):
    return sorted(e for e in os.listdir(folder) if e.startswith("kiln_"))


class Interrupted(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="kiln_signal_test_work_", dir="/tmp")
        self.tmp = tempfile.mkdtemp(prefix="signal_test_tmpdir_", dir=self.work)
        # Thousands of repeats of 50 ms: the run is still timing when the signal comes.
        self.long_config = write_config(self.work, "long.yaml", 100000, 50)
        self.env = dict(os.environ, TMPDIR=self.tmp, KILN_EXAMPLES=EXAMPLES)
        self.env.pop("KILN_PROGRESS", None)
        self.env["TERM"] = "xterm"

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.work], check=False)

    def start_in_pty(self, *args):
        """Starts `kiln run ARGS` on a new pseudo-terminal; returns (pid, master fd)."""
        pid, fd = pty.fork()
        if pid == 0:
            try:
                os.execve(KILN, [KILN, "run", *args], self.env)
            finally:
                os._exit(127)
        return pid, fd

    def read_until(self, fd, needle, timeout=60):
        """Everything the terminal shows until `needle` appears (fails after `timeout` s)."""
        seen = b""
        deadline = time.monotonic() + timeout
        while needle not in seen:
            left = deadline - time.monotonic()
            self.assertGreater(left, 0, f"no {needle!r} within {timeout} s; got {seen!r}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the child is gone
                    chunk = b""
                self.assertTrue(chunk, f"the terminal closed before {needle!r}; got {seen!r}")
                seen += chunk
        return seen

    def wait(self, pid, fd, timeout=30):
        """The child's wait status; drains the terminal so the child never blocks on it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                os.close(fd)
                return status
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    os.read(fd, 4096)
                except OSError:
                    pass
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
        self.fail(f"kiln did not end within {timeout} s of the signal")
        return 0

    def interrupt(self, send):
        pid, fd = self.start_in_pty(self.long_config)
        try:
            shown = self.read_until(fd, b"ETA")
            during = kiln_entries(self.tmp)
            self.assertTrue(any(e.startswith("kiln_local_run_") for e in during), during)
            send(pid, fd)
        except BaseException:
            os.kill(pid, signal.SIGKILL)
            raise
        return shown, self.wait(pid, fd)

    def test_ctrl_c_through_the_terminal(self):
        # ^C on the terminal: the line discipline sends SIGINT to the foreground group.
        shown, status = self.interrupt(lambda pid, fd: os.write(fd, b"\x03"))
        self.assertTrue(os.WIFSIGNALED(status), f"wait status {status:#x}")
        self.assertEqual(os.WTERMSIG(status), signal.SIGINT)
        self.assertEqual(kiln_entries(self.tmp), [])
        # On a terminal the progress is one line redrawn in place, with elapsed time and ETA.
        self.assertIn(b"\r\x1b[K[kiln] timing relu: repeat ", shown)
        self.assertIn(b"elapsed, ETA", shown)

    def test_sigterm(self):
        _, status = self.interrupt(lambda pid, fd: os.kill(pid, signal.SIGTERM))
        self.assertTrue(os.WIFSIGNALED(status), f"wait status {status:#x}")
        self.assertEqual(os.WTERMSIG(status), signal.SIGTERM)
        self.assertEqual(kiln_entries(self.tmp), [])

    def test_stale_directories_are_swept_and_live_ones_kept(self):
        def make(name, marked):
            path = os.path.join(self.tmp, name)
            os.makedirs(os.path.join(path, "sub", "deeper"))
            with open(os.path.join(path, "sub", "deeper", "kiln_tmp_mod.tar"), "wb") as f:
                f.write(b"x" * 1000)
            if marked:
                with open(os.path.join(path, MARKER), "w", encoding="utf-8") as f:
                    f.write("999999\n")
            return path

        make("kiln_local_run_stale1", True)  # its owner is gone: nobody holds the lock
        make("kiln_package_stale2", True)
        live = make("kiln_local_run_live", True)
        make("kiln_local_run_unmarked", False)  # not made by TemporaryDirectory: not ours
        elsewhere = tempfile.mkdtemp(prefix="kiln_target_", dir=self.work)
        open(os.path.join(elsewhere, MARKER), "w", encoding="utf-8").close()
        os.symlink(elsewhere, os.path.join(self.tmp, "kiln_local_run_link"))
        # A live owner: this process holds the lock, as a running kiln would.
        live_fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(live_fd, fcntl.LOCK_EX)
        try:
            quick = write_config(self.work, "quick.yaml", 1, 0)
            out = subprocess.run([KILN, "run", quick], env=self.env, capture_output=True,
                                 timeout=120, check=False)
            self.assertEqual(out.returncode, 0, out.stderr.decode())
        finally:
            os.close(live_fd)
        self.assertEqual(kiln_entries(self.tmp), ["kiln_local_run_link", "kiln_local_run_live",
                                                  "kiln_local_run_unmarked"])
        self.assertTrue(os.path.exists(os.path.join(elsewhere, MARKER)), "followed the link")


class PlainProgress(unittest.TestCase):
    """Progress in a pipe (a file, a CI log): none by default; forced, plain lines."""

    def run_piped(self, *args, env_progress=None):
        work = tempfile.mkdtemp(prefix="kiln_progress_test_", dir="/tmp")
        try:
            config = write_config(work, "short.yaml", 3, 20)
            env = dict(os.environ, KILN_EXAMPLES=EXAMPLES)
            env.pop("KILN_PROGRESS", None)
            if env_progress is not None:
                env["KILN_PROGRESS"] = env_progress
            out = subprocess.run([KILN, "run", *args, config], env=env, capture_output=True,
                                 timeout=120, check=False)
        finally:
            subprocess.run(["rm", "-rf", work], check=False)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        return out.stderr.decode()

    def test_off_by_default(self):
        self.assertEqual(self.run_piped(), "")

    def check_plain(self, err):
        self.assertNotIn("\x1b", err)
        self.assertNotIn("\r", err)
        lines = err.splitlines()
        self.assertRegex(lines[0], r"^\[kiln\] timing relu: repeat 1/3, .* elapsed, ETA .*")
        self.assertRegex(lines[-1], r"^\[kiln\] timing relu: repeat 3/3, .* elapsed, done$")

    def test_forced_by_flag(self):
        self.check_plain(self.run_piped("--progress"))

    def test_forced_by_environment(self):
        self.check_plain(self.run_piped(env_progress="always"))

    def test_flag_beats_environment(self):
        self.assertEqual(self.run_piped("--no-progress", env_progress="always"), "")


if __name__ == "__main__":
    KILN, EXAMPLES = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    unittest.main(argv=sys.argv[:1], verbosity=2)
