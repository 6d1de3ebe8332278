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
    if n.op is Op.REDUCE and n.arg.scan:
        return f"scan {n.arg.kind} {src_names[0]}, axis={n.arg.axes[0]}"
    if n.op is Op.REDUCE and n.arg.kind == "copy":
        return f"copy {src_names[0]}"
    if n.op is Op.REDUCE:
        a = n.arg
        axes = "all" if a.axes is None else (repr(a.axes) if isinstance(a.axes, AttrRef) else
                                             ",".join(map(str, a.axes)))
        return f"{a.kind} {src_names[0]}, axis={axes}, keep_dims={a.keep_dims!r}"
    if n.op in _LAYOUT_TEXT:
        return _LAYOUT_TEXT[n.op](n, src_names)
    return f"{n.op.value} {', '.join(src_names)}"


def _index_text(n: Node, s: list[str]) -> str:
    params = iter(s[1:])
    parts = []
    for it in n.arg:
        if it.kind == "slice":
            b = [next(params) if g else "" for g in it.given]
            parts.append(f"{b[0]}:{b[1]}" + (f":{b[2]}" if it.given[2] else ""))
        elif it.kind == "int":
            parts.append(next(params))
        elif it.kind == "new":
            parts.append("None")
        elif it.kind == "ellipsis":
            parts.append("...")
        else:
            parts.append("squeeze")
    return f"{s[0]}[{', '.join(parts)}]"


def _pad_text(n: Node, s: list[str]) -> str:
    w = s[2:]
    pairs = ", ".join(f"({w[2 * i]}, {w[2 * i + 1]})" for i in range(n.arg[1]))
    return f"pad {s[0]}, ({pairs}){' on every axis' if n.arg[0] == 'all' else ''}, value {s[1]}"


_LAYOUT_TEXT = {
    Op.DIM: lambda n, s: f"size of {s[0]}" if n.arg is None else f"dim {s[0]}.shape[{n.arg}]",
    Op.PERMUTE: lambda n, s: f"permute_dims {s[0]}, {n.arg!r}",
    Op.INDEX: _index_text,
    Op.RESHAPE: lambda n, s: f"reshape {s[0]}, " + (f"shape of {s[1]}" if n.arg == "like" else
                                                     f"({', '.join(s[1:])}{',' if len(s) == 2 else ''})"),
    Op.BROADCAST_TO: lambda n, s: f"broadcast_to {s[0]}, " + (f"shape of {s[1]}" if n.arg[0] == "like" else
                                                               f"({', '.join(s[1:])}{',' if len(s) == 2 else ''})"),
    Op.FLIP: lambda n, s: f"flip {s[0]}, axis={'all' if n.arg is None else ','.join(map(str, n.arg))}",
    Op.CONCAT: lambda n, s: f"concat {', '.join(s)}, axis={n.arg}",
    Op.PAD: _pad_text,
    Op.IOTA: lambda n, s: f"iota {s[0]}",
    Op.GATHER: lambda n, s: (f"take {s[0]}, {s[1]}" if n.arg.kind == "take" else f"take_along_axis {s[0]}, {s[1]}")
    + f", axis={n.arg.axis}" + ("" if n.arg.mode == "raise" else f", mode={n.arg.mode}"),
    Op.RANDOM: lambda n, s: f"random {n.arg!r} at {s[0]}, seed {s[1]}, offset {s[2]}"
                            + "".join(f", {k} {v}" for k, v in zip(("p",) if n.arg.kind == "bernoulli" else
                                                                     ("low", "high"), s[3:])),
}


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
    at = f" at {node.loc}" if node.loc else ""
    # While the op is traced (a trace per rank or shape asks the rules for a dim) it has no graph
    # yet, so no node numbers: the node is named by its text and source line alone.
    g = getattr(opdef, "graph", None)
    if g is None or id(node) not in g.index:
        return f"op {opdef.name}: {node_text(node, ['%?'] * len(node.srcs), opdef)}{at}"
    src = [f"%{g.idx(s)}" for s in node.srcs]
    return f"op {opdef.name}: node %{g.idx(node)} = {node_text(node, src, opdef)}{at}"
