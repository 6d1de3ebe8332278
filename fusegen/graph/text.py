"""The IR's text form: one line per node (``%3 = sum %2, axis=@axis, keep_dims=@keep_dims``),
with the user's source line. ``print(op)`` shows it; error messages, the emitted files' headers
and the op's content key (``OpDef.key``) are made of it."""
from __future__ import annotations

from .nodes import AttrRef, DTypeOf, Node, Op, ShapeOf


def node_text(n: Node, src_names: list[str], opdef=None) -> str:
    """``n`` as the right-hand side of its line, its sources named ``src_names``."""
    if n.op is Op.INPUT:
        return f"input {opdef.inputs[n.arg] if opdef else n.arg}"
    if n.op is Op.ATTR:
        return f"attr @{n.arg}"
    if n.op is Op.CONST:
        return f"const {n.arg[1]!r}"
    if n.op is Op.CAST:
        if isinstance(n.arg, DTypeOf):
            return f"cast {src_names[0]} to dtype of {src_names[1]}"
        return f"cast {src_names[0]} to {n.arg}"
    if n.op is Op.REDUCE and isinstance(n.arg.axes, ShapeOf):
        if n.arg.axes.rule == "broadcast":
            return f"sum_to {src_names[0]}, shape of {src_names[1]}"
        return f"unreduce {src_names[0]}, axes of {src_names[1]}"
    if n.op is Op.REDUCE:
        a = n.arg
        axes = "all" if a.axes is None else (repr(a.axes) if isinstance(a.axes, AttrRef) else
                                             ",".join(map(str, a.axes)))
        return f"{a.kind} {src_names[0]}, axis={axes}, keep_dims={a.keep_dims!r}"
    return f"{n.op.value} {', '.join(src_names)}"


def op_text(opdef, locations: bool = True) -> str:
    """The whole op: signature, one line per node, shape checks, outputs."""
    g = opdef.graph
    names = {}
    attrs = ", ".join(f"{s.name}: {s.type.value}" + ("" if s.required else f" = {s.default!r}")
                      for s in opdef.attrs.values())
    lines = [f"op {opdef.name}({', '.join(opdef.inputs)}{'; ' + attrs if attrs else ''}) {{"]
    for i, n in enumerate(g.nodes):
        names[id(n)] = f"%{i}"
        body = node_text(n, [names[id(s)] for s in n.srcs], opdef)
        line = f"  %{i} = {body}"
        if locations and n.loc and n.op not in (Op.INPUT, Op.ATTR):
            line = f"{line:<48} # {n.loc}"
        lines.append(line)
    for a, b, what in g.checks:
        lines.append(f"  check shape {names[id(a)]} == {names[id(b)]}  # {what}")
    lines.append("  return " + ", ".join(names[id(o)] for o in g.outputs))
    lines.append("}")
    return "\n".join(lines)


def where_text(opdef, node: Node) -> str:
    """``op NAME: node %i = ... at file:line``: how a message names the node it is about."""
    i = opdef.graph.idx(node)
    src = [f"%{opdef.graph.idx(s)}" for s in node.srcs]
    at = f" at {node.loc}" if node.loc else ""
    return f"op {opdef.name}: node %{i} = {node_text(node, src, opdef)}{at}"
