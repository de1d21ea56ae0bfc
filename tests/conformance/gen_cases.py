#!/usr/bin/env python3
"""Generates kiln conformance cases with numpy: inputs and expected outputs as raw little-endian files plus a
manifest that tests/conformance/conformance_test.cc reads. The cases themselves are in cases_*.py.

Manifest: one case per line, whitespace-separated:
    <name> <op> <attr> <n_in> (<file> <dtype> <ndim> <dims...>){n_in} <file> <dtype> <ndim> <dims...> [atol=<x>] [| xfail <backends> <reason>]
<attr> is a comma-separated list of numbers, or '-' when the op takes none (its layout per op: conformance_ops.cc).
dtypes are numpy names (float32, int8, uint32, bool, ...). <backends> is CPU, INTERP, CPU,INTERP or *.

Expected values always come from numpy here, never from kiln. Where kiln's result dtype legitimately differs from
numpy 2's (kiln follows tinygrad's promotion lattice), the case casts numpy's result to kiln's dtype and says why
(`Case.note`); gen_cases.py --notes lists them.

Usage: gen_cases.py OUT_DIR | gen_cases.py --notes
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases_elementwise  # noqa: E402
import cases_nn  # noqa: E402
import cases_reduce_movement  # noqa: E402


FAMILIES = [cases_elementwise, cases_reduce_movement, cases_nn]


def spec(path, arr):
    arr = np.array(arr, order="C")  # (ascontiguousarray would turn 0-d into 1-d)
    arr.astype(arr.dtype.newbyteorder("<")).tofile(path)
    return [os.path.basename(path), arr.dtype.name, str(arr.ndim)] + [str(d) for d in arr.shape]


def all_cases():
    out = []
    for fam in FAMILIES:
        for c in fam.cases():
            c.family = fam.__name__.replace("cases_", "") + "/" + c.family
            out.append(c)
    names = [c.name for c in out]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate case names: {sorted(dup)}"
    return out


def main():
    cs = all_cases()
    if sys.argv[1] == "--notes":
        for c in cs:
            if c.note or c.xfail:
                print(f"{c.name}: {c.note or ''}{' XFAIL(' + c.xfail[0] + '): ' + c.xfail[1] if c.xfail else ''}")
        fams = {}
        for c in cs:
            fams[c.family] = fams.get(c.family, 0) + 1
        for f, n in sorted(fams.items()):
            print(f"{f}: {n}")
        print(f"total: {len(cs)}")
        return
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    lines = []
    for c in cs:
        want = np.asarray(c.want)
        toks = [c.name, c.op, ",".join(str(x) for x in c.attr) if c.attr else "-", str(len(c.ins))]
        for k, x in enumerate(c.ins):
            toks += spec(os.path.join(out_dir, f"{c.name}.in{k}.bin"), np.asarray(x))
        toks += spec(os.path.join(out_dir, f"{c.name}.out.bin"), want)
        if c.atol is not None:
            toks.append(f"atol={c.atol:.6g}")
        if c.xfail:
            toks += ["|", "xfail", c.xfail[0], c.xfail[1]]
        lines.append(" ".join(toks))
    with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} cases to {out_dir}")


if __name__ == "__main__":
    main()
