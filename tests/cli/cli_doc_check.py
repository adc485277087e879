#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks docs/cli.md against `kiln ... --help`, so the reference cannot drift from the tool.

    cli_doc_check.py KILN DOCS/CLI.MD

For the global options and for every command (and `vm` subcommand) the `--help` output lists,
the options in its `--help` (but -h/--help, which every command has) must be the options
docs/cli.md gives for it, and vice versa. In docs/cli.md a command's options are those in its
`### `kiln CMD ...`` heading and, when the heading names one command, in the first column of
the section's tables; the global options are the first column of the "Global options" table.
An option the tool requires must not be shown as optional (in [brackets]) in the heading.
Exits 1 listing every difference.
"""
import re
import subprocess
import sys

OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def help_text(kiln, args):
    out = subprocess.run([kiln, *args, "--help"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"`kiln {' '.join(args)} --help` exited with {out.returncode}:\n{out.stderr}")
    return out.stdout


def help_options(text):
    """(options, required options, subcommands) of one CLI11 help page."""
    options, required, subcommands = set(), set(), []
    section = None
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            section = line[:-1].strip()
            continue
        m = re.match(r"^  (\S+)", line)
        if not m:
            continue
        if section == "Options":
            names = [n for n in m.group(1).split(",") if n.startswith("-")]
            names = [n for n in names if n not in ("-h", "--help")]
            options.update(names)
            if " REQUIRED" in line:
                required.update(names)
        elif section == "Subcommands":
            subcommands.append(m.group(1))
    return options, required, subcommands


def doc_sections(doc):
    """{command: (options, optional options)} and the global options from docs/cli.md."""
    commands, global_options = {}, set()
    sections = re.split(r"^(?=##+ )", doc, flags=re.M)
    for section in sections:
        heading, _, body = section.partition("\n")
        table_options = set()
        for row in re.findall(r"^\|([^|\n]*)\|", body, flags=re.M):
            table_options.update(OPTION.findall(row.replace("`", " ")))
        table_options -= {"-h", "--help"}
        if heading.startswith("## Global options"):
            global_options = table_options
            continue
        if not heading.startswith("### "):
            continue
        segments = [s for s in re.findall(r"`([^`]*)`", heading) if s.startswith("kiln ")]
        for seg in segments:
            words = seg.split()[1:]
            name = []
            for w in words:
                if re.fullmatch(r"[a-z][a-z-]*", w):
                    name.append(w)
                else:
                    break
            options = set(OPTION.findall(seg))
            optional = set()
            for bracket in re.findall(r"\[([^\]]*)\]", seg):
                optional.update(OPTION.findall(bracket))
            if len(segments) == 1:
                options |= table_options
            commands[" ".join(name)] = (options, optional)
    return commands, global_options


def main():
    kiln, doc_path = sys.argv[1], sys.argv[2]
    with open(doc_path, encoding="utf-8") as f:
        commands, global_doc = doc_sections(f.read())
    problems = []

    def compare(what, in_help, in_doc):
        for o in sorted(in_help - in_doc):
            problems.append(f"{what}: `{o}` is in --help but not in docs/cli.md")
        for o in sorted(in_doc - in_help):
            problems.append(f"{what}: `{o}` is in docs/cli.md but not in --help")

    global_help, _, top = help_options(help_text(kiln, []))
    compare("global options", global_help, global_doc)
    checked = []
    for cmd in top:
        subs = help_options(help_text(kiln, [cmd]))[2]
        for name in [f"{cmd} {s}" for s in subs] or [cmd]:
            options, required, _ = help_options(help_text(kiln, name.split()))
            if name not in commands:
                problems.append(f"`kiln {name}` has no '### `kiln {name} ...`' heading")
                continue
            doc_options, doc_optional = commands[name]
            compare(f"kiln {name}", options, doc_options)
            for o in sorted(required & doc_optional):
                problems.append(f"kiln {name}: `{o}` is required but docs/cli.md shows it optional")
            checked.append(name)
    for name in sorted(set(commands) - set(checked)):
        problems.append(f"docs/cli.md documents `kiln {name}`, which --help does not list")
    if problems:
        print("\n".join(problems))
        return 1
    print(f"docs/cli.md matches --help: global options and {len(checked)} commands "
          f"({', '.join(checked)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
