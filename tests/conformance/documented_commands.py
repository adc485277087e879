#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs the kiln-conformance commands docs/conformance.md gives for Kiln's own plugins.

The commands are read from the first ```sh block of the section "### Kiln's own plugins", exactly
as a user would copy them, and run from a fresh folder in which `build` is a link to the build
tree. Each must exit 0 with a `pass` verdict and write the report it names. Every device type
given with --type must have a command there, so that dropping one from the page fails too.

Usage: documented_commands.py --doc docs/conformance.md --build-dir BUILD --work DIR
                              --type cpu [--type opencl]
Exit 0 when every command passed, 1 otherwise (each problem is printed).
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys

SECTION = "### Kiln's own plugins"


def documented_commands(doc_text):
    """The commands of the section's first ```sh block, continuation lines joined."""
    start = doc_text.find("\n" + SECTION + "\n")
    if start < 0:
        raise SystemExit(f"the page has no section '{SECTION}'")
    section = doc_text[start + len(SECTION) + 2:]
    end = re.search(r"\n##", section)
    if end:
        section = section[:end.start()]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    if not block:
        raise SystemExit(f"the section '{SECTION}' has no ```sh block")
    joined = block.group(1).replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def devices_of(argv):
    """The values of --device in `argv`."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--device"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--type", action="append", default=[], dest="types",
                        help="a device type that must have a command (and whose plugin is built)")
    args = parser.parse_args()

    with open(args.doc, encoding="utf-8") as f:
        commands = documented_commands(f.read())
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    os.symlink(os.path.abspath(args.build_dir), os.path.join(args.work, "build"))

    problems = []
    covered = set()
    for command in commands:
        argv = shlex.split(command)
        if not argv or argv[0] != "build/bin/kiln-conformance":
            problems.append(f"not a build/bin/kiln-conformance command: {command}")
            continue
        devices = devices_of(argv)
        if not devices or not set(devices) <= set(args.types):
            print(f"skipped (device type not built here): {command}")
            continue
        covered.update(devices)
        print(f"$ {command}", flush=True)
        run = subprocess.run(argv, cwd=args.work, capture_output=True, text=True, timeout=240,
                             check=False)
        # ctest reads gtest's "[  SKIPPED ]" in a test's output as the test being skipped.
        print((run.stdout + run.stderr).replace("[", "|").replace("]", "|"))
        if run.returncode != 0:
            problems.append(f"exit {run.returncode} (expected 0): {command}")
        if not re.search(r"^kiln-conformance \S+: pass \(", run.stdout, re.M):
            problems.append(f"no 'pass' verdict line: {command}")
        if "--report" in argv:
            report = os.path.join(args.work, argv[argv.index("--report") + 1])
            if not os.path.isfile(report):
                problems.append(f"{report} was not written: {command}")
    for missing in sorted(set(args.types) - covered):
        problems.append(f"{args.doc} gives no command for device type '{missing}'")
    for problem in problems:
        print(f"FAIL: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
