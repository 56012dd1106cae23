#!/usr/bin/env python3
"""The values table of charts/apigw/README.md, generated from the `# --` comments of values.yaml
(helm-docs' convention: a comment block starting with `# --` right above a key describes it;
the key's default is the value in values.yaml).

  values_doc.py            print the table
  values_doc.py --write    rewrite the table between the README's markers
  values_doc.py --check    exit 1 when the README's table is stale, or a value has no `# --`
                           comment on itself or on a parent

Needs PyYAML (check.py puts the copy installed with kubernetes-validate on the path).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

CHART = Path(__file__).resolve().parents[1]
VALUES = CHART / "values.yaml"
README = CHART / "README.md"
START, END = "<!-- values-table:start -->", "<!-- values-table:end -->"

KEY = re.compile(r"^(\s*)([A-Za-z0-9_.-]+|\"[^\"]+\"):(?:\s|$)")
DOC = re.compile(r"^\s*# -- ?(.*)$")
MORE = re.compile(r"^\s*#(?: (.*))?$")


def load_values():
    import yaml  # noqa: PLC0415
    return yaml.safe_load(VALUES.read_text()) or {}


def documented(values: dict) -> list[tuple[str, str]]:
    """(dotted key, description) for every key with a `# --` comment, in file order."""
    out, stack, pending = [], [], None
    for line in VALUES.read_text().splitlines():
        m = DOC.match(line)
        if m:
            pending = [m.group(1).strip()]
            continue
        m = MORE.match(line)
        if m and pending is not None:
            pending.append((m.group(1) or "").strip())
            continue
        m = KEY.match(line)
        if not m:
            if line.strip() and not line.lstrip().startswith("#"):
                pending = None
            continue
        indent, key = len(m.group(1)), m.group(2).strip('"')
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [key]
        stack.append((indent, key))
        node = values
        for part in path:
            node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
        if node is KeyError:  # inside a list or a literal: not a value of its own
            pending = None
            continue
        if pending is not None:
            out.append((".".join(path), " ".join(p for p in pending if p)))
            pending = None
    return out


def leaves(node, prefix=""):
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else k)
    else:
        yield prefix


def lookup(values: dict, dotted: str):
    node = values
    for part in dotted.split("."):
        node = node[part]
    return node


def kind(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if value is None:
        return "string"
    return "object"


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(values: dict) -> str:
    rows = ["| Key | Type | Default | Description |", "|-----|------|---------|-------------|"]
    for key, description in documented(values):
        value = lookup(values, key)
        default = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        rows.append(f"| {key} | {kind(value)} | `{cell(default)}` | {cell(description)} |")
    return "\n".join(rows) + "\n"


def undocumented(values: dict) -> list[str]:
    keys = {k for k, _ in documented(values)}
    return [leaf for leaf in leaves(values)
            if not any(leaf == k or leaf.startswith(k + ".") for k in keys)]


def readme_with(text: str, generated: str) -> str:
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{generated}{END}{tail}"


def check() -> list[str]:
    """Problems with the README's table and the comments; empty when both are in order."""
    values = load_values()
    problems = [f"values.yaml: {leaf} has no `# --` comment (on itself or a parent)"
                for leaf in undocumented(values)]
    text = README.read_text() if README.exists() else ""
    if START not in text or END not in text:
        problems.append(f"{README}: no {START} ... {END} markers")
    elif readme_with(text, table(values)) != text:
        problems.append(f"{README}: the values table is stale; run {Path(__file__).relative_to(CHART.parents[1])} --write")
    return problems


def main(args: list[str]) -> int:
    if args == ["--write"]:
        README.write_text(readme_with(README.read_text(), table(load_values())))
        return 0
    if args == ["--check"]:
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    if args:
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(table(load_values()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
