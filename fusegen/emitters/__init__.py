"""The C++ emitters: MindSpore-AOT ``.cc`` (``emitters.mindspore_cpu``) and ``.cu`` (``emitters.cuda``),
XLA FFI handlers (``emitters.xla``), what they share (``emitters.common``) and their jinja2 templates
(``emitters/templates``). ``fusegen.abi_emit`` is their face (``fg.emit``)."""
