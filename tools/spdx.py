#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every source file of Kiln names its licence in an SPDX header (issue 30): the first line of
a C, C++, CUDA, HIP or OpenCL file, and the first line after the shebang of a Python, shell or
CMake file, is `SPDX-License-Identifier: Apache-2.0` in that language's comment.

    python3 tools/spdx.py [--fix] [REPO]

Lists the files without the header and exits 1 (0 when every file has it); with --fix, adds
the header to them instead. The files are those git tracks (the whole tree, less build folders,
outside a git checkout).
"""
import os
import subprocess
import sys

LICENSE = "SPDX-License-Identifier: Apache-2.0"
SLASHES = {".c", ".cc", ".h", ".hpp", ".cu", ".hip", ".cl"}
HASHES = {".py", ".pyi", ".sh", ".cmake"}
HASHED_NAMES = {"CMakeLists.txt", "run"}  # run: .ci/run


def comment_of(path):
    name = os.path.basename(path)
    ext = os.path.splitext(name)[1]
    if ext in SLASHES:
        return "// "
    if ext in HASHES or name in HASHED_NAMES:
        return "# "
    return None


def source_files(repo):
    try:
        out = subprocess.run(["git", "-C", repo, "ls-files"], capture_output=True, text=True,
                             check=True).stdout.split("\n")
        files = [f for f in out if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for folder, dirs, names in os.walk(repo):
            dirs[:] = [d for d in dirs if not d.startswith(("build", ".")) and d != "__pycache__"]
            files += [os.path.relpath(os.path.join(folder, n), repo) for n in names]
    return sorted(f for f in files if comment_of(f))


def has_header(lines):
    head = lines[:3]
    return any(LICENSE in line for line in head)


def fix(path, prefix, lines):
    at = 1 if lines and lines[0].startswith("#!") else 0
    lines.insert(at, prefix + LICENSE + "\n")
    with open(path, "w") as f:
        f.writelines(lines)


def main(argv):
    do_fix = "--fix" in argv
    args = [a for a in argv if a != "--fix"]
    repo = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    missing = []
    for rel in source_files(repo):
        path = os.path.join(repo, rel)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.readlines()
        if has_header(lines):
            continue
        if do_fix:
            fix(path, comment_of(rel), lines)
        missing.append(rel)
    if do_fix:
        print(f"spdx: added the header to {len(missing)} files")
        return 0
    for rel in missing:
        print(f"{rel}: no '{LICENSE}' in its first lines")
    if missing:
        print(f"spdx: {len(missing)} files without the header; python3 tools/spdx.py --fix adds it")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
