"""fusegen's version: part of every generated file's header and of every cache key that must
change when fusegen does (a module of its own so that every layer can read it)."""
from __future__ import annotations

__version__ = "0.1.0"
