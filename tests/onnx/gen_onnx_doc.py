#!/usr/bin/env python3
"""Generates the op coverage table of docs/onnx.md from the checked-in pass lists (tests/onnx/passlist_*.txt) and the
onnx==1.22.0 wheel's backend test data: per op, the node cases that use it and how many of them kiln passes.

  gen_onnx_doc.py            rewrite the table between the markers in docs/onnx.md
  gen_onnx_doc.py --check    exit 1 when docs/onnx.md is out of date
"""

from __future__ import annotations

import collections
import glob
import os
import sys

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DOC = os.path.join(REPO, "docs", "onnx.md")
BEGIN, END = "<!-- coverage table: tests/onnx/gen_onnx_doc.py -->", "<!-- end of coverage table -->"
GAP_TYPES = {8: "STRING", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ",
             21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1", 24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2", 14: "COMPLEX64",
             15: "COMPLEX128"}


def read_list(path: str) -> set[str]:
    return {l.strip() for l in open(path) if l.strip() and not l.startswith("#")} if os.path.exists(path) else set()


def ops_of(graph) -> set[str]:
    out = set()
    for n in graph.node:
        out.add(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}")
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out |= ops_of(a.g)
            for g in a.graphs:
                out |= ops_of(g)
    return out


def gap_types(model) -> set[str]:
    out = set()
    for v in list(model.graph.input) + list(model.graph.output):
        t = v.type.tensor_type.elem_type if v.type.HasField("tensor_type") else 0
        if t in GAP_TYPES:
            out.add(GAP_TYPES[t])
    return out


def table() -> str:
    data = sorted(glob.glob(os.path.join(REPO, ".venv/lib/python3*/site-packages/onnx/backend/test/data")))[-1]
    lines = []
    totals = []
    for folder in ["node", "pytorch-converted", "pytorch-operator", "simple", "light"]:
        passed = read_list(os.path.join(HERE, f"passlist_{folder}.txt"))
        if folder == "light":
            n = len(glob.glob(os.path.join(data, "light", "light_*.onnx")))
        else:
            n = len([d for d in glob.glob(os.path.join(data, folder, "*")) if os.path.exists(os.path.join(d, "model.onnx"))])
        totals.append(f"| {folder} | {n} | {len(passed)} | {100.0 * len(passed) / max(n, 1):.1f}% |")
    lines += ["| folder | cases | pass on CPU | share |", "| --- | --- | --- | --- |", *totals, ""]
    passed = read_list(os.path.join(HERE, "passlist_node.txt"))
    per_op = collections.defaultdict(lambda: [0, 0, 0, set()])  # cases, pass, dtype-gap cases, gap types
    for d in sorted(glob.glob(os.path.join(data, "node", "*"))):
        if not os.path.exists(os.path.join(d, "model.onnx")):
            continue
        m = onnx.load(os.path.join(d, "model.onnx"), load_external_data=False)
        name = f"node/{os.path.basename(d)}"
        gaps = gap_types(m)
        primary = ops_of(m.graph) if not name.endswith("_expanded") and "_expanded_" not in name else set()
        for op in primary:
            e = per_op[op]
            e[0] += 1
            e[1] += name in passed
            if gaps:
                e[2] += 1
                e[3] |= gaps
    lines += ["Per op: the non-expanded node cases whose graph uses the op (`_expanded` variants, the function bodies,",
              "are counted in the folder total only), how many pass, and how many need a dtype kiln lacks.", "",
              "| op | cases | pass | dtype gaps |", "| --- | --- | --- | --- |"]
    for op in sorted(per_op):
        c, p, g, types = per_op[op]
        gap = f"{g} ({', '.join(sorted(types))})" if g else ""
        lines.append(f"| {op} | {c} | {p} | {gap} |")
    return "\n".join(lines)


def main() -> int:
    doc = open(DOC).read()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    new = doc[:start] + "\n" + table() + "\n" + doc[end:]
    if "--check" in sys.argv:
        if new != doc:
            print("docs/onnx.md is out of date: run tests/onnx/gen_onnx_doc.py")
            return 1
        return 0
    open(DOC, "w").write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
