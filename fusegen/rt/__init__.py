"""The runtime's parts: the one ``Kernel`` (``rt.kernel``) and its contract with a backend
(``rt.call``: ``Call``, ``Executor``), what each device contributes (``rt.cpu``, ``rt.cuda``),
each backend's executor (``rt.numba_cpu``, ``rt.numba_cuda``, ``rt.aot``), write requests
(``rt.requests``) and the ``Engine`` (``rt.engine``, ``rt.ranges``). ``fusegen.runtime`` is the
face."""
