#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that docs/plugin-abi.md's table of 1.0 layouts (§6.2) and the static assertions of
tests/abi/abi_layout_test.c list the same structs, sizes, minimums and field offsets.

Usage: check_layout_doc.py abi_layout_test.c plugin-abi.md
Exit 0 when they agree; 1 with every difference listed otherwise.
"""
import re
import sys


def from_c(text):
    facts = set()
    for m in re.finditer(r"KILN_LAYOUT_SIZE\((\w+), (\d+)\)", text):
        facts.add((m[1], "size", int(m[2])))
    for m in re.finditer(r"KILN_LAYOUT_MIN\((\w+), (\w+), (\d+)\)", text):
        facts.add((m[1], "min " + m[2], int(m[3])))
    for m in re.finditer(r"KILN_LAYOUT_OFFSET\((\w+), (\w+), (\d+)\)", text):
        facts.add((m[1], "." + m[2], int(m[3])))
    return facts


def from_doc(text):
    facts = set()
    # | `KilnComponent` | 32 | 32 (`KILN_COMPONENT_SIZE_1_0`) | struct_size 0, kind 8, ... |
    row = re.compile(r"^\| `(Kiln\w+)` \| (\d+) \| ([^|]+) \| ([^|]+) \|$")
    for line in text.splitlines():
        m = row.match(line.strip())
        if not m:
            continue
        struct = m[1]
        facts.add((struct, "size", int(m[2])))
        minimum = re.match(r"(\d+) \(`(\w+)`\)", m[3].strip())
        if minimum:
            facts.add((struct, "min " + minimum[2], int(minimum[1])))
        for field in m[4].split(","):
            name, offset = field.split()
            facts.add((struct, "." + name, int(offset)))
    return facts


def main():
    c_facts = from_c(open(sys.argv[1]).read())
    doc_facts = from_doc(open(sys.argv[2]).read())
    if not c_facts or not doc_facts:
        print(f"no layout facts found (C: {len(c_facts)}, docs: {len(doc_facts)})")
        return 1
    only_c = sorted(c_facts - doc_facts)
    only_doc = sorted(doc_facts - c_facts)
    for fact in only_c:
        print("asserted in the C test but not in the docs:", *fact)
    for fact in only_doc:
        print("in the docs but not asserted by the C test:", *fact)
    if only_c or only_doc:
        return 1
    print(f"{len(c_facts)} sizes, minimums and offsets agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
