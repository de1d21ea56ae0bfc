"""tinygrad's VIZ record of small graphs under its symbolic_simple and symbolic rules, for
viz_tinygrad_test.

For each case the same graph is built with tinygrad's UOp API, rewritten by tinygrad's own
graph_rewrite(..., symbolic_simple or symbolic, name=...) with TRACK_MATCH_STATS=2 (what VIZ=1 turns on), and
printed with what tinygrad's VIZ shows for that rewrite: every match in order, by the source line
of the rule that fired. The graphs (input and tinygrad's result) are printed in kiln's UOp text
form (engine/uop/printer.h), so the C++ test rewrites the very same graph with kiln's rules:

  case <name> <matcher: symbolic_simple | symbolic> <compared: rules | result>
  input
  <UOp text>
  end
  output
  <UOp text>
  end
  match <file>:<line> <the rule's source line>
  ...
  done

Nothing here comes from kiln. Run with the project venv (tinygrad 0.14).
"""
import atexit
import os
import sys

os.environ["TRACK_MATCH_STATS"] = "2"  # read when tinygrad is imported: its matchers then track
os.environ.pop("VIZ", None)

from tinygrad.dtype import dtypes  # noqa: E402
from tinygrad.helpers import printable  # noqa: E402
from tinygrad.uop.ops import TRACK_MATCH_STATS, Ops, UOp, graph_rewrite, tracked_ctxs  # noqa: E402
from tinygrad.uop.symbolic import symbolic, symbolic_simple  # noqa: E402

# tinygrad writes the whole trace to a temp file at exit when tracking; nothing to keep here.
atexit.register(lambda: setattr(TRACK_MATCH_STATS, "value", 0))

ALU = {Ops.ADD: "ADD", Ops.MUL: "MUL", Ops.FLOORDIV: "FLOORDIV", Ops.FLOORMOD: "FLOORMOD",
       Ops.XOR: "XOR", Ops.AND: "AND", Ops.OR: "OR", Ops.MAX: "MAX", Ops.CMPLT: "CMPLT",
       Ops.CMPNE: "CMPNE", Ops.WHERE: "WHERE"}


def kiln_text(root: UOp) -> str:
    """root in kiln's UOp text form; tinygrad's variables (ALU BUFFER params) are DEFINE_VARs."""
    names: dict[UOp, str] = {}
    lines = []
    for u in root.toposort():
        if u.op is Ops.STACK and not u.src:
            continue  # a variable's empty shape
        ref = f"%{len(names)}"
        dt = "index" if u.dtype == dtypes.weakint else u.dtype.name
        if u.op is Ops.BUFFER:
            a = u.arg
            lo, hi = a.vmin_vmax
            lines.append(f'{ref} = DEFINE_VAR {dt} () var("{a.name}", {lo}, {hi})')
        elif u.op is Ops.CONST:
            v = u.arg
            lines.append(f"{ref} = CONST {dt} () {str(v).lower() if isinstance(v, bool) else v}")
        elif u.op in ALU:
            lines.append(f"{ref} = {ALU[u.op]} {dt} ({', '.join(names[s] for s in u.src)})")
        else:
            raise SystemExit(f"viz_tinygrad_ref: no kiln spelling for {u.op}")
        names[u] = ref
    lines.append(f"roots {names[root]}")
    return "\n".join(lines)


def cases() -> dict[str, tuple[str, UOp]]:
    x = UOp.variable("x", 0, 10, dtypes.int32)
    y = UOp.variable("y", 0, 10, dtypes.int32)
    def c(v):
        return x.const_like(v)
    return {
        # self folding: x+0, x*1, (x^y)^y, x//1, x//x, max(x,x), then 1*y
        "identities": ("symbolic_simple",
                       ((x + c(0)) * c(1) + ((x ^ y) ^ y) // c(1)) + (x // x) * y.maximum(y)),
        # constant folding and zero folding: x<x, where(const), 2+3, x&0, y^y, 0*0, then x+0
        "constants": ("symbolic_simple", (x < x).where(y, (c(2) + c(3)) * x) + (x & c(0)) * (y ^ y)),
        # symbolic: term combining and constant collection
        "combine terms": ("symbolic", x * c(2) + x * c(3)),
        "collect constants": ("symbolic", (x + c(3)) + c(4) + ((x * c(3)) * c(5))),
        "terms through a sum": ("symbolic", (x * c(3)) * c(5) + (y + x) + x * c(2)),
        # symbolic: range analysis folds a comparison and a quotient whose value is known
        "ranges": ("symbolic", (x < c(11)).where(y, c(0)) + (y // c(11))),
    }


def result_cases() -> dict[str, tuple[str, UOp]]:
    """Cases whose result is compared, not their rules: tinygrad folds div/mod of index (weakint) values through
    fold_divmod_general in many small rewrites, kiln's FoldDivMod builds the folded expression in one."""
    i = UOp.variable("i", 0, 10)  # weakint, kiln's index
    j = UOp.variable("j", 0, 3)
    def c(v):
        return i.const_like(v)
    return {
        "index div/mod": ("symbolic", (i * c(4) + c(8)) // c(4) + (j % c(16)) + (i * c(4) + j) // c(4)),
        "index mod of a sum": ("symbolic", (i * c(6) + j * c(2) + c(3)) % c(2) + (i * c(6) + c(5)) // c(3)),
    }


def main() -> None:
    out = []
    matchers = {"symbolic_simple": symbolic_simple, "symbolic": symbolic}
    compared = {**{n: (m, g, "rules") for n, (m, g) in cases().items()},
                **{n: (m, g, "result") for n, (m, g) in result_cases().items()}}
    for name, (matcher, graph, mode) in compared.items():
        before = sum(len(g) for g in tracked_ctxs)
        result = graph_rewrite(graph, matchers[matcher], name=f"viz parity {name}")
        rewrites = [r for g in tracked_ctxs for r in g][before:]
        mine = [r for r in rewrites if r.name == f"viz parity {name}"]
        if len(mine) != 1:
            raise SystemExit(f"viz_tinygrad_ref: expected one tracked rewrite for {name}, got {len(mine)}")
        out += [f"case {name} {matcher} {mode}", "input", kiln_text(graph), "end", "output", kiln_text(result), "end"]
        for (_before, _after, loc, _t) in mine[0].matches:
            src = " ".join(printable(loc).split())
            out.append(f"match {os.path.basename(loc[0])}:{loc[1]} {src}")
    out.append("done")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
