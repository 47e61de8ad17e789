#!/usr/bin/env python3
"""The house's figures (issue 48): the longest product functions, the largest product files
without their tests, and the product type names defined more than once.

usage: scripts/house-figures.py [SRC_DIR ...]   (default: crates/rollboot/src)

"Product" is everything outside `#[cfg(test)]` items and `tests.rs`/`tests/` files. The parse is
lexical (braces outside strings, chars and comments), which is enough for rustfmt'd code.
"""
import os
import re
import sys
from collections import defaultdict


def strip_noncode(text):
    """Blank out comments, strings and char literals, keeping line structure."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 20]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(code, open_idx):
    depth = 0
    for j in range(open_idx, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def test_ranges(code):
    """Character ranges of #[cfg(test)] items (modules or functions)."""
    ranges = []
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        k = code.find("{", m.end())
        semi = code.find(";", m.end())
        if semi != -1 and (k == -1 or semi < k):
            ranges.append((m.start(), semi))
            continue
        ranges.append((m.start(), block_end(code, k)))
    return ranges


def inside(pos, ranges):
    return any(a <= pos <= b for a, b in ranges)


def analyse(root):
    funcs, files, types = [], [], defaultdict(list)
    for dirpath, _, names in os.walk(root):
        for name in sorted(names):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if name == "tests.rs" or "/tests/" in "/" + rel or rel.startswith("tests/"):
                continue
            text = open(path, encoding="utf-8").read()
            code = strip_noncode(text)
            tr = test_ranges(code)
            test_lines = sum(code.count("\n", a, b) + 1 for a, b in tr)
            files.append((text.count("\n") - test_lines, rel))
            for m in re.finditer(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)", code):
                if inside(m.start(), tr):
                    continue
                k = m.end()
                # the body's brace: the first '{' before a ';' (a declaration has none)
                depth = 0
                while k < len(code):
                    ch = code[k]
                    if ch in "(<[":
                        depth += 1
                    elif ch in ")>]":
                        depth -= 1
                    elif ch == ";" and depth <= 0:
                        k = -1
                        break
                    elif ch == "{" and depth <= 0:
                        break
                    k += 1
                if k < 0 or k >= len(code):
                    continue
                e = block_end(code, k)
                start_line = code.count("\n", 0, m.start()) + 1
                lines = code.count("\n", m.start(), e) + 1
                funcs.append((lines, f"{rel}:{start_line} {m.group(1)}"))
            for m in re.finditer(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(struct|enum|trait|type|union)\s+([A-Za-z_][A-Za-z0-9_]*)", code, re.M):
                if inside(m.start(), tr):
                    continue
                types[m.group(2)].append(f"{rel} ({m.group(1)})")
    return funcs, files, types


def main():
    roots = sys.argv[1:] or ["crates/rollboot/src"]
    funcs, files, types = [], [], defaultdict(list)
    for root in roots:
        f, fi, t = analyse(root)
        funcs += f
        files += fi
        for k, v in t.items():
            types[k] += v
    # a fn nested inside another is counted in its parent too; rank outermost lengths
    funcs.sort(reverse=True)
    files.sort(reverse=True)
    print("longest product functions:")
    for n, where in funcs[:5]:
        print(f"  {n:5} {where}")
    print(f"  functions over 100 lines: {sum(1 for n, _ in funcs if n > 100)}")
    print("largest product files without their tests:")
    for n, rel in files[:5]:
        print(f"  {n:5} {rel}")
    print(f"  files over 1000 lines: {sum(1 for n, _ in files if n > 1000)}")
    dups = {k: v for k, v in types.items() if len(v) > 1}
    print(f"type names defined more than once: {len(dups)}")
    for k in sorted(dups):
        print(f"  {k}: {', '.join(dups[k])}")


if __name__ == "__main__":
    main()
