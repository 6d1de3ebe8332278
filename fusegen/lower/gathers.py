"""Gathers in the generated Python of both Numba backends (issue #17; DESIGN-indexmaps map kind 4).

A gather node reads its source array at an address with one data-dependent term: the checked
index times the stride of the gathered axis. ``GatherSlots`` lists what a fused group needs for
that: each gather node's axis extent (kernel argument ``gn<k>``), each gathered read's axis
stride (``gs<m>``, per leaf and map prefix), the operands that need an absolute base, and the
raise-mode gathers whose bad indices are counted. ``index_lines`` writes the index arithmetic
(the bad-index bookkeeping is the backend's ``flag`` callback: per-task counters on the CPU,
atomics on CUDA); ``address_terms`` writes the data-dependent part of a leaf's address.
"""
from __future__ import annotations

from ..ir import Node, Op, nodes_of
from ..plan.access import Gather
from ..plan.paths import path_steps


def address_terms(term_of: dict, n: Node, ctx: tuple, ew, stride: str) -> str:
    """`` + j * <stride of term m>`` for every gather between leaf ``n`` and the stage root in
    ``ctx`` (``term_of``: (leaf, steps up to its gather) -> m; ``stride``: its text, ``{}`` = m;
    ``ew.gathered``: each gather's checked index, by node and context). Shared with the C++
    emitters (``fusegen.emitters.gathers``)."""
    steps = path_steps(ctx, n)
    out = ""
    for k, step in enumerate(steps):
        if isinstance(step, Gather) and step.index == 0:
            pos = next(p for p, (g, i) in enumerate(ctx) if g is step.node and i == 0)
            out += f" + {ew.gathered[(id(step.node), ctx[:pos])]} * {stride.format(term_of[(n, steps[:k + 1])])}"
    return out


class GatherSlots:
    def __init__(self, stages, run):
        roots = [e for st in stages for e in [r.srcs[0] for r in st.reductions] + [n for _, n in st.writes]]
        self.nodes = [n for n in nodes_of(roots) if n.op is Op.GATHER]
        self.checks = [n for n in self.nodes if n.arg.mode == "raise"]
        self.terms: list[tuple] = []        # (access, step index): one stride argument each
        self.term_of: dict[tuple, int] = {}
        self.operands: set = set()          # operand keys read through a gather
        self.bad_flags: set = set()         # the names of the checked indices' bad flags (``index_lines``)
        for st in stages:
            for a in st.reads:
                for k, step in enumerate(a.steps):
                    if isinstance(step, Gather) and step.index == 0:
                        key = (a.node, a.steps[:k + 1])
                        if key not in self.term_of:
                            self.term_of[key] = len(self.terms)
                            self.terms.append((a, k))
                        self.operands.add(run.operand_of[(a.slot, a.steps)])

    def args(self) -> list[str]:
        return [f"gn{k}" for k in range(len(self.nodes))] + [f"gs{m}" for m in range(len(self.terms))]

    def index_lines(self, node: Node, raw: str, ew, flag) -> str:
        """Append to writer ``ew`` the lines that make raw index ``raw`` one inside the axis
        (checked, wrapped or clipped; the address is clamped, so no read is ever out of bounds);
        ``flag(c, bad, raw)`` gives the lines that record a bad index of checked gather ``c``."""
        k = self.nodes.index(node)
        n, mode = f"gn{k}", node.arg.mode
        name = f"{ew.prefix}g{k}_{len(ew.gathered)}"
        if mode == "wrap":
            ew.lines.append((name, f"{raw} % {n}"))
        elif mode == "clip":
            ew.lines.append((name, f"min(max({raw}, 0), {n} - 1)"))
        else:
            ew.lines.append((name + "r", raw))
            ew.lines.append((name + "a", f"{name}r + {n} if {name}r < 0 else {name}r"))
            ew.lines.append((name + "b", f"({name}a < 0) | ({name}a >= {n})"))
            self.bad_flags.add(name + "b")
            ew.lines.extend(flag(self.checks.index(node), name + "b", name + "r"))
            ew.lines.append((name, f"min(max({name}a, 0), {n} - 1)"))
        return name

    def address_terms(self, n: Node, ctx: tuple, ew) -> str:
        """`` + j * gs<m>`` for every gather between leaf ``n`` and the stage root in ``ctx``."""
        return address_terms(self.term_of, n, ctx, ew, "gs{}")

    @staticmethod
    def refuse(op_name: str):
        from ..errors import FusegenError
        raise FusegenError(f"op {op_name}: a gather from an iota or a modular view is not supported yet (issue #17)")

    # --- Numba CPU: per task, a count of bad indices and one of them per checked gather; the
    # function returns (which checked gather + 1, the bad index), or (0, 0)
    @staticmethod
    def cpu_flag(c: int, bad: str, raw: str) -> list[tuple[str, str]]:
        return [(f"gb{c}", f"gb{c} + {bad}"), (f"gv{c}", f"{raw} if {bad} else gv{c}")]

    def cpu_index(self, node: Node, ctx: tuple, raw: str, ew) -> str:
        """The CPU's ExprWriter gather hook."""
        return self.index_lines(node, raw, ew, self.cpu_flag)

    def cpu_lines(self, where: str) -> list[str]:
        k = range(len(self.checks))
        if not self.checks:
            return []
        if where == "alloc":
            return [f"    gerr = np.zeros((ntasks, {2 * len(self.checks)}), dtype=np.int64)"]
        if where == "task start":
            return [line for c in k for line in (f"        gb{c} = 0", f"        gv{c} = 0")]
        if where == "task end":
            return [line for c in k for line in (f"        gerr[t, {2 * c}] = gb{c}", f"        gerr[t, {2 * c + 1}] = gv{c}")]
        return ["    for t in range(ntasks):"] + [line for c in k for line in (
            f"        if gerr[t, {2 * c}] != 0:", f"            return ({c + 1}, gerr[t, {2 * c + 1}])")] + ["    return (0, 0)"]
