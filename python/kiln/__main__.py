# SPDX-License-Identifier: Apache-2.0
"""`python -m kiln ...` (and the `kiln` command a pip install puts on PATH): the kiln tool that
the wheel bundles (kiln/bin/kiln), with the same arguments (docs/cli.md)."""

import os
import pathlib
import sys


def main():
    tool = pathlib.Path(__file__).resolve().parent / "bin" / "kiln"
    if not tool.exists():
        sys.exit(f"kiln: {tool} is missing (the package was not installed from a wheel; in a "
                 "build tree, run build/bin/kiln)")
    os.execv(str(tool), [str(tool), *sys.argv[1:]])


if __name__ == "__main__":
    main()
