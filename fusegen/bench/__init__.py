"""``fusegen bench``: the benchmark, in modules readable one at a time: what is measured
(``bench.cases``: one row per reference op), measuring on the CPU (``bench.harness``, with the
machine probes of ``bench.machine`` and the methods of ``bench.methods``), on a GPU
(``bench.cuda``, ``bench.cuda_methods``), and presenting (``bench.report``, which never measures)."""
