"""Native code: the compiler cache (``native.build``), the AOT-ABI host and the libraries it
loads (``native.host``, ``native.library``), memory a hosted kernel writes (``native.buffers``,
``native.device``) and ``AotKernel`` (``native.aot_kernel``, with its device-memory calls in
``native.aot_cuda``)."""
