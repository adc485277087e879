#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that dependencies in the C++ tree point one way (tools -> core -> sdk; plugins -> sdk),
that core's folders form no import cycle, and that library code never reaches the API-edge
convenience overloads (docs/architecture.md).

Units. Each folder of core/src is a unit; files directly in core/src are each their own unit
(api_defaults.cc is the unit `api_defaults`).

Who defines what. The script reads C++ with regular expressions and brace matching, after blanking
comments, string contents and preprocessor lines: namespaces, classes, function declarations
(in headers and class bodies) and definitions (anywhere), each under its qualified name
(kiln::Tensor::empty, kiln::rpc::connect, ...). A symbol is defined by the units whose files
define it, so one overload set may belong to several units (kiln::Tensor::empty: ffi and
api_defaults).

Dependencies. A file of unit U depends on unit V when it includes, directly or through other
headers, a private header of V (core/src/V/...), or when it includes a public header
(core/include/kiln/...) that declares a symbol V defines and the file names that symbol: a free
function called by name; a static member called as `Class::name(...)`; a member called after
`.` or `->` in a file that names its class (or unqualified inside the class's own members); a
class named as a type (its constructors and destructor). So a public header is attributed by
the symbols it declares and where they are defined, not by its file name, and a file pays only
for what it uses: vm/ includes kiln/module.h but calls neither Module::load nor
Module::export_library, which runtime/ defines; a file of ffi/ that called them would close a
cycle ffi -> runtime -> ffi. Headers that declare nothing defined in core/src
(kiln/device_context.h, kiln/error.h, ...) tie to no unit.

API-edge overloads. Every function core/src/api_defaults.cc defines is an edge symbol: an
overload that uses Runtime::global(). Its parameters (and the defaults its header declaration
gives) fix how many arguments it accepts; the explicit overloads of the same name take a
Runtime, DeviceContext or DeviceTypeNames parameter. Inline functions in public headers that
call an edge symbol (kiln::load_module(path)) are edge symbols too. A call in core/src (outside
api_defaults.cc) is reported when its argument count fits an edge overload, and
  - no explicit overload that takes that count has, at its runtime/context position, an
    argument spelled like one (an identifier containing runtime, context or ctx; `rt`;
    `*this`) or declared as one in the enclosing function, and
  - no other declaration of that name takes the count (a non-edge overload without a context,
    such as VirtualMachine(module, devices, ...); an implicit copy constructor; for `.name(...)`
    a member of another class; for unqualified `name(...)` a free function of another
    namespace, a member of the enclosing class, or a function of the same file).
Where the text shows an argument's class (a variable or parameter of the enclosing function
declared with a kiln class, or `Class(...)`, `Class{...}`), overloads whose parameter there is
an unrelated kiln class without a converting constructor, a number or a string are ruled out
first (so VirtualMachine(exec, libs, devices) with `vm::Executable exec` is the edge overload,
not the module form). Naming Runtime::global() in core/src outside api_defaults.cc is reported
too. Edges into api_defaults are shown by --graph and reported as calls; they are left out of
the cycle search.

Limits (it reads text, it does not compile): the receiver of `.name(...)` is not known and
argument types only as above. So where an explicit and an edge overload both take the count,
an explicit call whose runtime argument is spelled otherwise and declared elsewhere (a member
`host_`) is reported, and an edge call whose count another same-named function also takes is
missed (tracker.request("key", 2), which RPCSession::Impl::request(code, body) could be). A
dependency through a member called on an object whose class the file never names (`auto`) is
missed, and one through a same-named member of another class the file names is added. Calls
through a function pointer, std::invoke, emplace/emplace_back or a `using` alias are not seen;
neither are definitions a macro generates. Template argument lists containing `<` or `>`
comparisons may miscount arguments.

Usage: tools/check_layers.py [--graph] [--why] [--edges] [REPO]
  --graph  the unit graph; --why  the graph with one reason per edge;
  --edges  the edge symbols, the argument counts they take and where they are defined.
Exit 0 when clean, 1 with the violations.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
EDGE_FILE = "api_defaults.cc"
# Parameter types that make an overload the explicit form of an edge overload.
CONTEXT_TYPES = {"Runtime", "DeviceContext", "DeviceTypeNames"}
# An argument spelled like a runtime or context.
CONTEXT_ARG = re.compile(r"(?i)(runtime|context|ctx)|\brt\b|\*\s*this\b")
# Parameter types no kiln class converts to.
PLAIN_TYPES = {"bool", "char", "int", "long", "short", "float", "double", "size_t", "int8_t",
               "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t",
               "string", "string_view", "path"}
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "decltype", "static_assert",
            "alignof", "catch", "throw", "new", "delete", "case", "do", "else", "co_return",
            "noexcept", "requires", "typeid", "alignas", "using", "typedef", "operator"}
SPECIFIERS = {"static", "inline", "constexpr", "consteval", "virtual", "explicit", "friend",
              "extern", "const", "volatile", "mutable", "typename", "template", "unsigned",
              "signed", "[[nodiscard]]"}


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


# ------------------------------------------------------------------------------------------------
# Reading C++.

def blank(text):
    """`text` with comments, the contents of string and character literals and preprocessor
    lines replaced by spaces (newlines kept, so offsets and line numbers stay)."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n and (text[j] != "\n" or text[j - 1] == "\\"):
                j += 1
            wipe(i, j)
            i = j
            continue
        if c == "\n":
            line_start = True
            i += 1
            continue
        if c in " \t\r":
            i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end
            wipe(i + 2, end + len(m.group(1)) + 1)
            i = end + len(m.group(1)) + 2
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            wipe(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def match_close(text, i):
    """Index of the bracket closing the one at text[i] ((, [ or {), or len(text)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = [pairs[text[i]]]
    j = i + 1
    while j < len(text) and stack:
        c = text[j]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            stack.pop()
        j += 1
    return j - 1


def split_top(text):
    """`text` (an argument or parameter list without its brackets) split at its top-level
    commas; a `<...>` after a name counts as brackets when it closes before any of ;(){}."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "<" and i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_ ") and \
                re.search(r"\w\s*$", text[:i]):
            k, level = i + 1, 1
            while k < len(text) and level:
                if text[k] in ";(){}" or text.startswith("&&", k) or text.startswith("||", k):
                    break
                level += {"<": 1, ">": -1}.get(text[k], 0)
                k += 1
            if level == 0:
                i = k
                continue
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    parts = [p.strip() for p in parts]
    return [] if parts == [""] else parts


def type_key(param):
    """The last name of a parameter's type: `const std::filesystem::path& p = {}` -> path."""
    p = split_default(param)[0]
    p = re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", p))  # two levels of template arguments
    p = re.sub(r"\[[^\]]*\]", "", p)
    words = re.findall(r"[A-Za-z_]\w*", p)
    words = [w for w in words if w not in ("const", "volatile", "struct", "class", "typename")]
    if not words:
        return "?"
    # `Device device`: the last word is the parameter's name unless the type ends in & or *.
    if len(words) > 1 and re.search(r"\w\s*$", p) and not re.search(r"::\s*\w+\s*$", p):
        return words[-2]
    return words[-1]


def split_default(param):
    depth = 0
    for i, c in enumerate(param):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == "=" and depth == 0 and param[i - 1:i] not in ("=", "!", "<", ">") \
                and param[i + 1:i + 2] != "=":
            return param[:i].strip(), param[i + 1:].strip()
    return param.strip(), None


class Func:
    """One function declaration or definition."""

    def __init__(self, path, line, scope, qualname, params, prefix, suffix, is_class_scope,
                 has_body):
        self.path, self.line = path, line
        self.qualname = qualname                  # kiln::Tensor::empty
        self.name = qualname.rsplit("::", 1)[-1]  # empty
        self.owner = qualname.rsplit("::", 1)[0] if "::" in qualname else ""
        self.params = params                      # parameter texts
        self.keys = tuple(type_key(p) for p in params)
        self.required = sum(1 for p in params if split_default(p)[1] is None and p != "...")
        self.max = float("inf") if any(p.endswith("...") for p in params) else len(params)
        self.is_static = bool(re.search(r"\bstatic\b", prefix))
        self.is_explicit = bool(re.search(r"\bexplicit\b", prefix))
        self.deleted = bool(re.search(r"=\s*delete\b", suffix))
        self.is_class_scope = is_class_scope
        self.has_body = has_body
        self.scope = scope
        self.edge = None                          # the edge definition this overload is
        self.body = None                          # (start, end) of the body in the file

    def fits(self, n):
        return self.required <= n <= self.max

    def context_index(self):
        for i, k in enumerate(self.keys):
            if k in CONTEXT_TYPES:
                return i
        return None

    def signature(self, shown=None):
        """`name(param names)`, the names after the first `shown` (at least the required ones)
        elided."""
        names = []
        keep = len(self.params) if shown is None else max(shown, self.required)
        for p in self.params[:keep]:
            decl = split_default(p)[0]
            m = re.search(r"(\w+)\s*$", decl)
            names.append(m.group(1) if m and type_key(p) != m.group(1) else type_key(p))
        more = ", ..." if keep < len(self.params) else ""
        return f"{self.short()}({', '.join(names)}{more})"

    def short(self):
        """The qualified name without kiln:: (and a constructor as its class)."""
        q = self.qualname[len("kiln::"):] if self.qualname.startswith("kiln::") else self.qualname
        parts = q.split("::")
        return "::".join(parts[:-1]) if len(parts) > 1 and parts[-1] == parts[-2] else q


HEAD_NAME = re.compile(r"((?:::\s*)?(?:\w+\s*(?:<[^<>;{}]*>)?\s*::\s*)*"
                       r"(?:~?\w+|operator\s*(?:\(\)|\[\]|[^\s(]+)))\s*$")


def parse_head(head):
    """(qualified name as written, params, prefix, suffix) of a function head, or None."""
    h = re.sub(r"^\s*(?:(?:public|private|protected)\s*:\s*)+", "", head)
    h = re.sub(r"\[\[[^\]]*\]\]", lambda m: " " * len(m.group(0)), h)
    if re.match(r"\s*(template\b|using\b|typedef\b|friend\b|namespace\b|enum\b|static_assert\b|"
                r"extern\s*\"|class\b|struct\b|union\b)", h):
        m = re.match(r"\s*template\s*<", h)
        if not m:
            return None
        level, k = 1, m.end()
        while k < len(h) and level:
            level += {"<": 1, ">": -1}.get(h[k], 0)
            k += 1
        h = h[k:]
        if re.match(r"\s*(friend|using|class|struct)\b", h):
            return None
    # The first top-level `(` that follows a name.
    depth = 0
    for p, c in enumerate(h):
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "=" and depth == 0 and not re.search(r"operator\s*\W*$", h[:p]):
            return None  # an initializer, not a function
        elif c == "(" and depth == 0:
            m = HEAD_NAME.search(h[:p])
            if not m:
                return None
            name = re.sub(r"\s+", "", m.group(1))
            prefix = h[:m.start()]
            close = match_close(h, p)
            if close >= len(h):
                return None
            return name, split_top(h[p + 1:close]), prefix, h[close + 1:]
    return None


class Source:
    """One parsed file: its functions, classes and the extents of its function bodies."""

    def __init__(self, path, rel):
        self.path, self.rel = path, rel
        self.raw = read(path)
        self.text = blank(self.raw)
        self.words = set(re.findall(r"\w+", self.text))
        self.lines = [0]
        for i, c in enumerate(self.text):
            if c == "\n":
                self.lines.append(i + 1)
        self.funcs = []       # Func
        self.classes = set()  # qualified class names
        self.bases = {}       # class name -> names of its direct bases
        self.bodies = []      # (start, end, Func) of every function body
        self.parse()

    def line_of(self, pos):
        lo, hi = 0, len(self.lines) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.lines[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def parse(self):
        text = self.text
        # frame: [kind, qualified name parts, statement start]; kinds ns, class, func, block, paren
        stack = [["ns", [], 0]]
        for i, c in enumerate(text):
            top = stack[-1]
            if c in "([":
                stack.append(["paren", top[1], None])
            elif c in ")]":
                if len(stack) > 1 and stack[-1][0] == "paren":
                    stack.pop()
            elif c == "{":
                if top[0] not in ("ns", "class"):
                    stack.append(["block", top[1], None])
                    continue
                head = text[top[2]:i]
                m_ns = re.match(r"\s*(?:inline\s+)?namespace\s*([\w:]*)\s*$", head)
                m_cls = re.match(r"\s*(?:(?:public|private|protected)\s*:\s*)*"
                                 r"(?:template\s*<[^{;]*?>\s*)?(?:class|struct|union)\s+"
                                 r"(?:\w+\s+)*?(\w+(?:::\w+)*)\s*(?:final\s*)?(?::[^{;]*)?$",
                                 head, re.S)
                if m_ns:
                    name = m_ns.group(1)
                    parts = name.split("::") if name else ["<anon>"]
                    stack.append(["ns", top[1] + parts, i + 1])
                elif re.match(r'\s*extern\s*"\s*"\s*$', head):
                    stack.append(["ns", top[1], i + 1])
                elif m_cls:
                    qual = top[1] + m_cls.group(1).split("::")
                    self.classes.add("::".join(qual))
                    base = re.search(r":([^{;]*)$", head[m_cls.end(1):])
                    self.bases[qual[-1]] = set(re.findall(r"(\w+)\s*(?:<[^{;]*>)?\s*(?:,|$)",
                                                          base.group(1))) if base else set()
                    stack.append(["class", qual, i + 1])
                else:
                    f = self.function(head, top, i, has_body=True)
                    if f:
                        stack.append(["func", f, None])
                        f.body = (i, match_close(text, i))
                        self.bodies.append((i, f.body[1], f))
                    else:
                        stack.append(["block", top[1], None])
            elif c == "}":
                if len(stack) > 1:
                    done = stack.pop()
                    parent = stack[-1]
                    if parent[0] in ("ns", "class") and done[0] != "paren":
                        parent[2] = i + 1
            elif c == ";" and top[0] in ("ns", "class"):
                self.function(text[top[2]:i], top, i, has_body=False)
                top[2] = i + 1

    def function(self, head, frame, pos, has_body):
        parsed = parse_head(head)
        if not parsed:
            return None
        name, params, prefix, suffix = parsed
        scope = frame[1]
        in_class = frame[0] == "class"
        parts = name.lstrip(":").split("::")
        bare = parts[-1]
        if bare in KEYWORDS or not re.match(r"~?\w+$|operator", bare):
            return None
        specs = re.findall(r"[\w:<>,]+|[&*]", prefix)
        has_type = any(w not in SPECIFIERS for w in specs)
        is_ctor = bare.lstrip("~") == (parts[-2] if len(parts) > 1 else
                                       (scope[-1] if in_class and scope else None))
        if not has_type and not is_ctor:
            return None
        qual = "::".join(scope + parts) if not name.startswith("::") else "::".join(parts)
        line = self.line_of(pos - len(head.lstrip()))
        f = Func(self.rel, line, scope, qual, params, prefix, suffix, in_class, has_body)
        f.head_start = pos - len(head)
        self.funcs.append(f)
        return f

    def enclosing(self, pos):
        """The innermost function whose body holds `pos`, or None."""
        best = None
        for start, end, f in self.bodies:
            if start < pos < end and (best is None or start > best[0]):
                best = (start, f)
        return best[1] if best else None


# ------------------------------------------------------------------------------------------------
# Calls and references.

QUALIFIER = re.compile(r"((?:::\s*)?(?:\w+\s*(?:<[^<>;{}()]*>)?\s*::\s*)*)$")


def qualifier_before(text, pos):
    """(qualifier components, member access?, preceding char) of the name at text[pos]."""
    window = text[max(0, pos - 300):pos]
    m = QUALIFIER.search(window)
    qual = m.group(1) if m else ""
    parts = [re.sub(r"<.*", "", p).strip() for p in re.split(r"::", qual)][:-1] if qual else []
    before = window[:len(window) - len(qual)].rstrip()
    member = before.endswith(".") or before.endswith("->")
    return parts, member, before[-1:] if before else ""


def qualifier_fits(parts, scope):
    """Whether a written qualifier (["rpc"], ["", "kiln", "rpc"], []) can name `scope`."""
    if not parts:
        return True
    if parts[0] == "":
        return parts[1:] == scope
    return scope[len(scope) - len(parts):] == parts if len(parts) <= len(scope) else False


class Call:
    def __init__(self, pos, args, kind):
        self.pos, self.args, self.kind = pos, args, kind  # kind: free, member, qual, ctor, inclass


def find_calls(src, sym_name, is_ctor, start=0, end=None):
    """Every call-like use of the name `sym_name` in src.text[start:end], as Calls."""
    text = src.text
    end = len(text) if end is None else end
    out = []
    for m in re.compile(r"\b%s\b" % re.escape(sym_name)).finditer(text, start, end):
        pos = m.start()
        parts, member, prev = qualifier_before(text, pos)
        after = m.end()
        rest = text[after:after + 200]
        if is_ctor:
            if member or prev == "~" or re.match(r"\s*(::|<)", rest):
                continue
            mt = re.search(r"make_(?:unique|shared)\s*<\s*(?:[\w\s]*::\s*)*$",
                           text[max(0, pos - 200):pos])
            if mt:
                mo = re.match(r"\s*>\s*\(", rest)
                if not mo:
                    continue
                open_at = after + mo.end() - 1
            else:
                mo = re.match(r"\s*(?:\w+\s*)?([({])", rest)
                if not mo or re.match(r"\s*(const|override|noexcept|final)\b", rest):
                    continue
                open_at = after + mo.start(1)
            kind = "ctor"
        else:
            mo = re.match(r"\s*\(", rest)
            if not mo:
                continue
            open_at = after + mo.end() - 1
            kind = "member" if member else ("qual" if parts else "free")
        close = match_close(text, open_at)
        out.append((Call(pos, split_top(text[open_at + 1:close]), kind), parts))
    return out


# ------------------------------------------------------------------------------------------------
# The check.

def main(argv):
    show_graph = "--graph" in argv
    show_edges = "--edges" in argv
    show_why = "--why" in argv
    show_graph = show_graph or show_why
    args = [a for a in argv if not a.startswith("--")]
    repo = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    core_src = os.path.join(repo, "core", "src")
    core_inc = os.path.join(repo, "core", "include")
    problems = []

    # 1. core and sdk never reach into plugins/, tools/, tests/ or the LLM runtime (llm/, its
    # headers kiln/llm/); plugins never into core/; llm/ only through core's public headers.
    rules = [("core", ("plugins/", "tools/", "tests/", "llm/", "kiln/llm/")),
             ("sdk", ("plugins/", "core/", "tools/", "llm/", "kiln/llm/")),
             ("plugins", ("core/", "tools/", "llm/", "kiln/llm/")),
             ("llm", ("core/", "tools/", "tests/", "plugins/"))]
    for top, forbidden in rules:
        for root, _, files in os.walk(os.path.join(repo, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".hpp", ".cc", ".c", ".cpp")):
                    continue
                path = os.path.join(root, name)
                for inc in INCLUDE.findall(read(path)):
                    if inc.startswith(forbidden) or "/plugins/" in inc:
                        problems.append(f"{os.path.relpath(path, repo)} includes \"{inc}\"")

    # 2. Parse core/src and the public headers.
    sources = {}  # path relative to core/src -> Source
    for root, _, files in os.walk(core_src):
        for name in sorted(files):
            if name.endswith((".h", ".cc")):
                full = os.path.join(root, name)
                sources[os.path.relpath(full, core_src)] = Source(full,
                                                                  os.path.relpath(full, repo))
    headers = {}  # kiln/x.h -> Source
    for root, _, files in os.walk(core_inc):
        for name in sorted(files):
            if name.endswith((".h", ".hpp")):
                full = os.path.join(root, name)
                headers[os.path.relpath(full, core_inc)] = Source(full,
                                                                  os.path.relpath(full, repo))

    def unit_of(rel):
        return rel.split("/")[0] if "/" in rel else rel.rsplit(".", 1)[0]

    edge_unit = unit_of(EDGE_FILE)
    classes = set()
    for s in list(sources.values()) + list(headers.values()):
        classes |= s.classes

    # Declarations (public headers, private headers, class bodies) by qualified name, one per
    # parameter-type list; and the units that define each qualified name.
    decls = {}
    for s in list(headers.values()) + list(sources.values()):
        for f in s.funcs:
            if f.has_body and not f.is_class_scope and f.path.endswith(".cc"):
                continue  # an out-of-line definition, not a declaration
            if "<anon>" in f.qualname:
                continue
            same = decls.setdefault(f.qualname, [])
            if not any(g.keys == f.keys for g in same):
                same.append(f)
    definers = {}  # qualified name -> {unit: Func}
    for rel, s in sources.items():
        for f in s.funcs:
            if f.has_body and "<anon>" not in f.qualname:
                definers.setdefault(f.qualname, {}).setdefault(unit_of(rel), f)

    def is_ctor(f):
        return f.owner in classes and f.name == f.owner.rsplit("::", 1)[-1]

    # 3. Edge symbols: what api_defaults.cc defines, matched to their declarations.
    edges = []  # Func declarations that are edge overloads
    edge_src = sources.get(EDGE_FILE)
    if edge_src:
        for d in edge_src.funcs:
            if not d.has_body or d.qualname == "kiln::Runtime::global":
                continue
            match = [g for g in decls.get(d.qualname, []) if g.keys == d.keys]
            decl = match[0] if match else d
            if not match:
                print(f"check_layers: note: no declaration of {d.signature()} "
                      f"({d.path}:{d.line}) found; its defaults are unknown", file=sys.stderr)
            decl.edge = d
            if decl not in decls.setdefault(d.qualname, []):
                decls[d.qualname].append(decl)
            edges.append(decl)

    def overloads(qualname):
        return [g for g in decls.get(qualname, []) if not g.deleted]

    def foreign(qualname, name, kind, enclosing):
        """Same-named declarations a call of `kind` might mean instead of `qualname`'s."""
        out = []
        for q, fs in decls.items():
            if q == qualname or q.rsplit("::", 1)[-1] != name:
                continue
            for g in fs:
                if g.deleted:
                    continue
                in_class = g.owner in classes
                if kind == "member" and in_class and not g.is_static:
                    out.append(g)
                elif kind == "free" and (not in_class or (enclosing and
                                                           enclosing.startswith(g.owner))):
                    out.append(g)
        return out

    short_classes = {c.rsplit("::", 1)[-1] for c in classes}
    bases = {}
    for s in list(sources.values()) + list(headers.values()):
        for c, b in s.bases.items():
            bases.setdefault(c, set()).update(b)
    converting = set()  # classes with a non-explicit one-parameter constructor
    for q, fs in decls.items():
        for g in fs:
            if is_ctor(g) and g.required <= 1 <= g.max and not g.is_explicit and not g.deleted \
                    and g.keys[:1] != (q.rsplit("::", 1)[-1],):
                converting.add(q.rsplit("::", 1)[-1])

    def derives(a, b, seen=()):
        return a == b or any(derives(x, b, seen + (a,)) for x in bases.get(a, ())
                             if x not in seen)

    def arg_type(src, f, pos, arg):
        """The class an argument has when the text says so plainly (a variable or parameter
        declared with that class in the enclosing function, or `Class(...)`), else None."""
        a = arg.strip()
        m = re.fullmatch(r"std\s*::\s*move\s*\((.*)\)", a, re.S)
        a = m.group(1).strip() if m else a
        m = re.fullmatch(r"(?:\w+\s*::\s*)*(\w+)\s*[({].*[)}]", a, re.S)
        if m:  # `Class(...)` or `Class{...}` as a whole
            whole = match_close(a, m.end(1) + len(a[m.end(1):]) - len(a[m.end(1):].lstrip()))
            return m.group(1) if m.group(1) in short_classes and whole == len(a) - 1 else None
        if not re.fullmatch(r"\w+", a) or f is None:
            return None
        found = None
        decl = re.compile(r"([A-Za-z_][\w:]*)\s*(?:<[^;{}()]*>)?\s*[&*]*\s*\b%s\b\s*"
                          r"(?=[=;,)({\[])" % re.escape(a))
        for d in decl.finditer(src.text, f.head_start, pos):
            if d.group(1) not in KEYWORDS:
                found = d.group(1).rsplit("::", 1)[-1]
        return found if found in short_classes else None

    def fits_types(g, types):
        for i, t in enumerate(types):
            if t is None or i >= len(g.keys):
                continue
            p = g.keys[i]
            if p in short_classes and p not in converting and not derives(t, p):
                return False
            if p in PLAIN_TYPES:
                return False  # a kiln class passed where a number or string is expected
        return True

    def judge(src, edge_set, call, enclosing_cls):
        """The edge overload `call` reaches, or None."""
        qualname = edge_set[0].qualname
        n = len(call.args)
        f = src.enclosing(call.pos)
        types = [arg_type(src, f, call.pos, a) for a in call.args]
        fitting_edges = [g for g in edge_set if g.edge and g.fits(n)]
        if not fitting_edges:
            return None
        others = [g for g in overloads(qualname) if not g.edge and g.fits(n)]
        for g in others:
            k = g.context_index()
            if k is not None and k < n and (CONTEXT_ARG.search(call.args[k]) or
                                            (types[k] and derives(types[k], g.keys[k]))):
                return None
        fitting_edges = [g for g in fitting_edges if fits_types(g, types)]
        others = [g for g in others if fits_types(g, types)]
        if not fitting_edges:
            return None
        if any(g.context_index() is None for g in others):
            return None  # a non-edge overload without a context takes this count too
        rivals = foreign(qualname, edge_set[0].name, call.kind, enclosing_cls)
        if call.kind in ("free", "inclass"):  # and what this file declares under that name
            rivals += [g for g in src.funcs if g.name == edge_set[0].name and not g.deleted
                       and g.qualname != qualname]
        if any(g.fits(n) and fits_types(g, types) for g in rivals):
            return None
        if is_ctor(edge_set[0]) and n == 1:
            cls = edge_set[0].owner
            declared = [g for g in decls.get(qualname, []) if g.keys == (cls.split("::")[-1],)]
            if not declared:
                return None  # the implicit copy or move constructor
        return fitting_edges[0]

    def edge_calls(src, edge_set, start=0, end=None):
        """(pos, edge Func, Call) of every call in src that reaches an overload in `edge_set`."""
        sym = edge_set[0]
        owner_parts = sym.owner.split("::") if sym.owner else []
        ctor = is_ctor(sym)
        cls = sym.owner if sym.owner in classes else None
        ns = owner_parts[:-1] if cls else owner_parts
        found = []
        name = cls.rsplit("::", 1)[-1] if ctor else sym.name
        for call, parts in find_calls(src, name, ctor, start, end):
            f = src.enclosing(call.pos)
            if f is None:
                continue  # not in a function body
            enclosing_cls = f.owner if f.owner in classes else None
            inside = bool(cls and enclosing_cls and (enclosing_cls + "::").startswith(cls + "::"))
            if ctor:
                if not qualifier_fits(parts, ns):
                    continue
            elif cls:
                if call.kind == "qual":
                    if not parts or parts[-1] != cls.rsplit("::", 1)[-1] or \
                            not qualifier_fits(parts[:-1], ns):
                        continue
                elif call.kind == "free":
                    if not inside:
                        continue
                    call.kind = "inclass"
                elif call.kind == "member" and sym.is_static:
                    continue
            else:
                if call.kind == "member" or not qualifier_fits(parts, ns):
                    continue
            hit = judge(src, edge_set, call, enclosing_cls)
            if hit:
                found.append((call.pos, hit, call))
        return found

    # Inline functions of public headers that call an edge symbol are edge symbols too.
    changed = True
    while changed:
        changed = False
        sets = {}
        for e in edges:
            sets.setdefault(e.qualname, []).append(e)
        for h in headers.values():
            for es in sets.values():
                for pos, hit, _ in edge_calls(h, es):
                    f = h.enclosing(pos)
                    if f is None or f.edge or "<anon>" in f.qualname:
                        continue
                    f.edge, f.via = f, hit
                    edges.append(f)
                    if f not in decls.setdefault(f.qualname, []):
                        decls[f.qualname].append(f)
                    changed = True

    if show_edges:
        for e in edges:
            hi = "..." if e.max == float("inf") else e.max
            via = f", calls {e.via.short()}" if getattr(e, "via", None) else ""
            print(f"edge: {e.signature()}  [{e.required}..{hi} arguments] "
                  f"({e.edge.path}:{e.edge.line}{via})")

    # 4. Library calls into the edge, and Runtime::global() outside api_defaults.cc.
    edge_sets = {}
    for e in edges:
        edge_sets.setdefault(e.qualname, []).append(e)
    edge_uses = {}  # unit -> ["file:line calls ..."]
    for rel, src in sorted(sources.items()):
        if rel == EDGE_FILE:
            continue
        for m in re.finditer(r"\bRuntime\s*::\s*global\b", src.text):
            problems.append(f"{src.rel}:{src.line_of(m.start())} names Runtime::global(); only "
                            f"core/src/{EDGE_FILE} may (pass the Runtime the caller gave)")
        hits = sorted((h for es in edge_sets.values() for h in edge_calls(src, es)),
                      key=lambda h: h[0])
        for pos, hit, call in hits:
            n = len(call.args)
            where = f"{src.rel}:{src.line_of(pos)}"
            via = f", which calls {hit.via.short()}" if getattr(hit, "via", None) else ""
            problems.append(
                f"{where} calls the API-edge overload {hit.signature(n)} ({n} "
                f"argument{'s' * (n != 1)}; {hit.edge.path}:{hit.edge.line}{via}), which uses "
                "Runtime::global(): pass the Runtime or DeviceContext the caller gave")
            edge_uses.setdefault(unit_of(rel), []).append(f"{where} calls {hit.signature(n)}")

    # 5. Unit graph: private headers by folder, public headers by the symbols a file uses.
    def resolve(inc):
        if os.path.isfile(os.path.join(core_src, inc)):
            return ("src", inc)
        if os.path.isfile(os.path.join(core_inc, inc)):
            return ("inc", inc)
        return None

    reach_cache = {}

    def reach(kind, inc, stack=()):
        """The headers `inc` is and includes, transitively, as (kind, path)."""
        key = (kind, inc)
        if key in reach_cache:
            return reach_cache[key]
        if key in stack:
            return {key}
        s = sources.get(inc) if kind == "src" else headers.get(inc)
        text = s.raw if s else read(os.path.join(core_src if kind == "src" else core_inc, inc))
        out = {key}
        for sub in INCLUDE.findall(text):
            r = resolve(sub)
            if r:
                out |= reach(*r, stack=stack + (key,))
        reach_cache[key] = out
        return out

    # Per public header: qualified name -> (its declaration there, or None for a class's
    # constructors and destructor; {unit: a definition there}), api_defaults left out.
    header_symbols = {}
    for inc, h in headers.items():
        syms = {}
        for f in h.funcs:
            units = {u: d for u, d in definers.get(f.qualname, {}).items() if u != edge_unit}
            if units:
                syms[f.qualname] = (f, units)
        for cls in h.classes:  # a class named as a type: its constructors and destructor
            short = cls.rsplit("::", 1)[-1]
            for special in (f"{cls}::{short}", f"{cls}::~{short}"):
                units = {u: d for u, d in definers.get(special, {}).items() if u != edge_unit}
                if units:
                    syms[special] = (None, units)
        header_symbols[inc] = syms

    def uses(src, qualname, decl):
        """Whether src names the symbol `qualname` (declared by `decl`, None for a class)."""
        parts = qualname.split("::")
        name = parts[-1]
        if (parts[-2] if decl is None else name.lstrip("~")) not in src.words:
            return False
        if len(parts) > 1 and "::".join(parts[:-1]) in classes and parts[-2] not in src.words:
            return False  # a member of a class the file never names (`.find(` of a std map)
        if decl is None or name.lstrip("~") == parts[-2]:
            cls, ns = parts[-2], parts[:-2]
            for m in re.finditer(r"\b%s\b" % re.escape(cls), src.text):
                q, member, prev = qualifier_before(src.text, m.start())
                if not member and prev != "~" and qualifier_fits(q, ns):
                    return True
            return False
        owner = "::".join(parts[:-1])
        pattern = r"\b%s\s*\(" % re.escape(name)
        for m in re.finditer(pattern, src.text):
            q, member, _ = qualifier_before(src.text, m.start())
            if owner in classes:
                if (member and not decl.is_static) or (q and q[-1] == parts[-2]):
                    return True
                if not q and not member:
                    f = src.enclosing(m.start())
                    if f and (f.owner + "::").startswith(owner + "::"):
                        return True
            elif not member and qualifier_fits(q, parts[:-1]):
                return True
        return False

    graph, why = {}, {}
    for rel, src in sources.items():
        u = unit_of(rel)
        graph.setdefault(u, set())
        reached = set()
        for inc in INCLUDE.findall(src.raw):
            r = resolve(inc)
            if r:
                reached |= reach(*r)
        for kind, inc in sorted(reached):
            if kind == "src":
                v = unit_of(inc)
                if v != u and v not in graph[u]:
                    graph[u].add(v)
                    why[(u, v)] = f"{rel} includes \"{inc}\""
                continue
            for qualname, (decl, units) in sorted(header_symbols.get(inc, {}).items()):
                new = [v for v in units if v != u and v not in graph[u]]
                if new and uses(src, qualname, decl):
                    for v in new:
                        graph[u].add(v)
                        d = units[v]
                        what = qualname.replace("kiln::", "", 1).split("::")
                        if len(what) > 1 and what[-1].lstrip("~") == what[-2]:
                            what = f"class {'::'.join(what[:-1])}"
                        else:
                            what = "::".join(what)
                        why[(u, v)] = f"{rel} uses {what} ({inc}; defined in {d.path})"
    for u, reasons in edge_uses.items():
        graph.setdefault(u, set()).add(edge_unit)
        why[(u, edge_unit)] = reasons[0]

    # Strongly connected components (Tarjan); edges into api_defaults are reported above.
    index, low, on, stack, sccs = {}, {}, set(), [], []
    counter = [0]

    def successors(v):
        return sorted(w for w in graph.get(v, ()) if w != edge_unit)

    def connect(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in successors(v):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            connect(v)
    for comp in sccs:
        if len(comp) > 1:
            lines = [f"  {u} -> {v}: {why[(u, v)]}" for u in comp for v in successors(u)
                     if v in comp]
            problems.append("import cycle between core folders " + ", ".join(comp) + ":\n" +
                            "\n".join(lines))

    if show_graph:
        for u in sorted(graph):
            print(f"{u} -> {', '.join(sorted(graph[u])) or '(nothing)'}")
            if show_why:
                for v in sorted(graph[u]):
                    print(f"  {v}: {why[(u, v)]}")
    for p in problems:
        print(f"check_layers: {p}")
    if problems:
        return 1
    print(f"check_layers: {len(graph)} core units, no cycle; core, sdk, plugins and llm include only "
          f"what they may; no library call reaches the {len(edges)} API-edge overloads")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
