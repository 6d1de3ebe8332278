"""``fg.linalg``: the array API's linear-algebra extension, as far as fused kernels go (see
``fusegen.graph.linalg_ext``): norms, diagonal, trace, cross, outer, and the contractions."""
from .graph.linalg import matmul, tensordot, vecdot
from .graph.layout import matrix_transpose
from .graph.linalg_ext import cross, diagonal, matrix_norm, outer, trace, vector_norm

__all__ = ["cross", "diagonal", "matmul", "matrix_norm", "matrix_transpose", "outer", "tensordot", "trace",
           "vecdot", "vector_norm"]
