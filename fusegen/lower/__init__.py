"""The Numba lowerings' parts (``fusegen.lower_cpu`` and ``fusegen.lower_cuda`` are the faces): what
both share, Python spellings and writing generated source to an importable, cacheable file
(``lower.pysource``), and the numba-cuda kernel source of a group (``lower.cuda_source``)."""
