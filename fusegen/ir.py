"""The IR's face: the public names of nodes, tracing, shape and dtype rules and the text form,
re-exported from ``fusegen.graph`` (where each part lives in a module of its own):

* ``graph.nodes``: ``Op``, ``Node`` and its arguments, ``Graph``, graph queries;
* ``graph.trace``: ``Tensor`` and the functions that build nodes while an op is traced;
* ``graph.opdef``: ``OpDef`` and the ``@op`` decorator;
* ``graph.rules``: ``infer`` and the shape and dtype rules (the C++ emitters render the same);
* ``graph.text``: the text form;
* ``graph.vocab``, ``graph.grad``, ``graph.requests``: the fg. functions, ``fg.grad``, and
  write requests as op rewrites.

A traced op is *rank- and dtype-polymorphic*: inputs carry neither, and attributes stay
symbolic, because an emitted AOT kernel only learns them at Init/run time.
"""
from __future__ import annotations

from .dtypes import AttrType, DType  # noqa: F401  (re-exported: the IR's types)
from .graph.nodes import (  # noqa: F401
    BINARY_UFUNC, NO_VALUE, PIECEWISE, REDUCE_KINDS, SCAN_KINDS, STATIC_PARAMS, UNARY_UFUNC, UNKNOWN_DIM, UNKNOWN_RANK, VIEWS,
    AttrRef, AttrSpec, DTypeOf, Graph, Item, Node, Op, Perm, ReduceArg, ShapeOf, computed_nodes, is_scan, is_static, leaves_of,
    nodes_of, shape_atoms, stable_key, value_srcs,
)
from .graph.opdef import OpDef, op, set_eager_executor  # noqa: F401
from .graph.rules import (  # noqa: F401
    NodeInfo, Shape, Spec, broadcast_shapes, infer, infer_nodes, normalize_axes, reduce_dtypes, same_shape,
)
from .graph.text import node_text  # noqa: F401
from .graph.trace import (  # noqa: F401
    Attr, NeedsRank, NeedsShape, Tensor, cast, cast_like, expect_same_shape, reads_a_dim, reduce, sum_to, unreduce,
    where,
)
from .graph import methods  # noqa: E402,F401  (registers NumPy's array methods on Tensor: x.var(), x.argmax(), ...)
