"""What the two Numba lowerings (``fusegen.lower_cpu``, ``fusegen.lower_cuda``) share: Python
spellings and writing generated source to an importable, cacheable file (``lower.pysource``)."""
