"""NumPy's ``einsum``, as the same composition ``matmul`` and ``tensordot`` are (``graph.linalg``):
each operand's axes permuted into one order of labels, the labels it lacks added as size-1 axes,
the operands multiplied (broadcast) and the product summed over the labels the output drops. One
fused loop nest, which never stores the product: attention's ``"bhqd,bhkd->bhqk"`` reads q and k
through index maps.

Why not hand the string to a backend: every backend already fuses views, products and sums, and
gradients, ``vmap`` and the emitted sources then follow without a rule of their own.

NumPy's semantics: subscripts are letters; ``...`` stands for the axes no letter names, aligned
from the right and broadcast across operands; without ``->`` the output is the ellipsis axes
then every letter that appears exactly once, in alphabetical order. A letter repeated within one
operand takes its diagonal (``"ii->i"``, ``"ii"`` a trace): the elements off it are replaced by
zero before the sum over the second copy, so an inf or NaN there does not leak in. Axes that
share a letter across operands broadcast as NumPy's do (a size 1 against any size; other
sizes differing are a broadcast error at run time). ``dtype=`` casts the operands first, as NumPy's
does; ``optimize=`` is accepted and has nothing to do (one loop nest either way).
"""
from __future__ import annotations

import string

from ..errors import TraceError
from .layout import as_tensor, dim, expand_dims, iota, ndim_of, permute_dims
from .linalg import contract
from .trace import Tensor, cast, cast_like, expect_same_shape, op_prefix, user_loc, where

_LETTERS = frozenset(string.ascii_letters)


def _fail(msg: str):
    raise TraceError(f"{op_prefix()}einsum: {msg} [at {user_loc()}]")


def _parse(subscripts, n: int) -> tuple[list[str], str | None]:
    """The operands' terms and the output's (None: implicit), spaces removed."""
    if not isinstance(subscripts, str):
        _fail(f"subscripts must be a string such as 'ij,jk->ik', got {type(subscripts).__name__} (the "
              "interleaved form einsum(a, [0, 1], b, [1, 2]) is not supported)")
    text = subscripts.replace(" ", "")
    lhs, arrow, out = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != n:
        _fail(f"subscripts {subscripts!r} name {len(terms)} operand{'s' * (len(terms) != 1)}, got {n}")
    for t in terms + ([out] if arrow else []):
        rest = t.replace("...", "", 1)
        if "." in rest or not set(rest) <= _LETTERS:
            _fail(f"subscripts {subscripts!r}: a term holds letters and at most one '...', got {t!r}")
    if arrow and len(set(out.replace("...", ""))) != len(out.replace("...", "")):
        _fail(f"output subscripts {out!r} repeat a letter")
    return terms, (out if arrow else None)


def _labels(term: str, rank: int, k: int, ell: list[str]) -> list[str]:
    """Operand ``k``'s label per axis: its letters, and for ``...`` the ellipsis labels (the
    last ones of ``ell``, which holds one per ellipsis axis of the widest operand)."""
    head, has, tail = term.partition("...")
    if not has:
        if len(term) != rank:
            _fail(f"operand {k} has {rank} dims but subscripts {term!r} name {len(term)}")
        return list(term)
    n_ell = rank - len(head) - len(tail)
    if n_ell < 0:
        _fail(f"operand {k} has {rank} dims but subscripts {term!r} name {len(head) + len(tail)} and '...'")
    while len(ell) < n_ell:
        ell.insert(0, f"...{len(ell)}")
    return list(head) + ell[len(ell) - n_ell:] + list(tail)


def _diagonal(x: Tensor, labels: list[str]) -> tuple[Tensor, list[str]]:
    """``x`` with each repeated label's diagonal taken: its other copies become axes summed away
    after the off-diagonal elements are zeroed (a where, not a product: inf * 0 is NaN)."""
    while len(set(labels)) != len(labels):
        i = next(i for i, c in enumerate(labels) if labels.index(c) != i)
        first = labels.index(labels[i])
        expect_same_shape(iota(dim(x, first)), iota(dim(x, i)),
                          f"einsum: the two axes labelled {labels[i]!r} differ in size")
        ri = ndim_of(x)
        a = expand_dims(iota(dim(x, first)), axis=tuple(k for k in range(ri) if k != first))
        b = expand_dims(iota(dim(x, i)), axis=tuple(k for k in range(ri) if k != i))
        x = contract(cast_like(where(a == b, x, 0), x), i)
        labels = labels[:i] + labels[i + 1:]
    return x, labels


def einsum(subscripts, /, *operands, dtype=None, optimize=False, **unsupported) -> Tensor:
    """NumPy's ``einsum(subscripts, *operands, dtype=None, optimize=False)`` on traced tensors (see
    the module's docstring); ``out=``, ``order=`` and ``casting=`` have no meaning inside an op."""
    del optimize   # (one fused loop nest, whatever the order of contraction)
    if unsupported:
        _fail(f"unsupported keyword {sorted(unsupported)[0]!r} (einsum inside an op takes dtype= and optimize=)")
    if not operands:
        _fail("needs at least one operand")
    xs = [as_tensor(x, "einsum") for x in operands]
    if dtype is not None:
        xs = [cast(x, dtype) for x in xs]
    terms, out = _parse(subscripts, len(xs))
    ell: list[str] = []
    labelled = [_labels(t, ndim_of(x), k, ell) for k, (t, x) in enumerate(zip(terms, xs))]
    counts: dict[str, int] = {}   # (a letter repeated within a term counts twice: "ii" is a trace)
    for labels in labelled:
        for c in labels:
            counts[c] = counts.get(c, 0) + 1
    pairs = [_diagonal(x, labels) for x, labels in zip(xs, labelled)]
    if out is None:
        outs = ell + sorted(c for c, n in counts.items() if n == 1 and not c.startswith("..."))
    else:
        head, has, tail = out.partition("...")
        outs = list(head) + (ell if has else []) + list(tail)
        if not has and ell:
            _fail(f"output subscripts {out!r} drop the '...' axes the operands have; write '...' in the output")
        missing = [c for c in outs if c not in counts]
        if missing:
            _fail(f"output subscript {missing[0]!r} names no axis of any operand")
    order = outs + [c for c in counts if c not in outs]
    product = None
    for x, labels in pairs:
        mine = sorted(labels, key=order.index)
        if mine != labels:
            x = permute_dims(x, tuple(labels.index(c) for c in mine))
        missing = tuple(i for i, c in enumerate(order) if c not in labels)
        if missing:
            x = expand_dims(x, axis=missing)
        product = x if product is None else product * x
    summed = tuple(range(len(outs), len(order)))
    return contract(product, summed) if summed else product
