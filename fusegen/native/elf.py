"""Just enough ELF to validate a shared object and read what fusegen needs from it: its dynamic
symbols, the libraries it needs, and whether it carries CUDA device code. Pure Python, no
``readelf``: a library is checked before ``dlopen`` runs its constructors. (Re-exported by
``native.build``.)"""
from __future__ import annotations

import os
import struct
from typing import NamedTuple

from ..errors import LibraryError


class _Elf(NamedTuple):
    data: bytes
    is64: bool
    endian: str
    e_type: int
    sections: list[tuple[int, int, int, int, int]]  # (type, offset, size, link, entsize)
    names: list[str]                                  # each section's name ("" when unreadable)


def _read_elf(path: str | os.PathLike) -> _Elf:
    """Parse just enough ELF to validate a shared object and list its dynamic symbols."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise LibraryError(f"cannot read library {os.fspath(path)!r}: {exc}") from None
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        raise LibraryError(f"{os.fspath(path)!r} is not an ELF shared library")
    is64, endian = data[4] == 2, "<" if data[5] == 1 else ">"
    # e_type ... e_shstrndx; the address-sized fields are 8 bytes in ELF64, 4 in ELF32.
    header = struct.unpack_from(endian + ("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH"), data, 16)
    e_type, shoff, shentsize, shnum, shstrndx = header[0], header[5], header[10], header[11], header[12]
    sh_fmt = endian + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII")
    # Section headers sit at the end of a linker's output, so a truncated file
    # loses them first; every section's bytes must lie inside the file too.
    if shnum == 0 or shoff + shnum * shentsize > len(data) or shentsize < struct.calcsize(sh_fmt):
        raise LibraryError(f"{os.fspath(path)!r} is a truncated or malformed ELF file")
    sections, name_offsets = [], []
    for i in range(shnum):
        sh_name, sh_type, _, _, off, sz, link, _, _, entsize = struct.unpack_from(sh_fmt, data,
                                                                                 shoff + i * shentsize)
        if sh_type != 8 and off + sz > len(data):  # SHT_NOBITS occupies no file bytes
            raise LibraryError(f"{os.fspath(path)!r} is a truncated or malformed ELF file")
        sections.append((sh_type, off, sz, link, entsize))
        name_offsets.append(sh_name)
    names = [""] * shnum
    if shstrndx < shnum:
        _, str_off, str_size, _, _ = sections[shstrndx]
        table = data[str_off:str_off + str_size]
        names = [_c_string(table, n) or "" for n in name_offsets]
    return _Elf(data, is64, endian, e_type, sections, names)


class _Facts(NamedTuple):
    e_type: int
    symbols: tuple[str, ...]
    needed: tuple[str, ...]
    cuda: bool


_FACTS: dict[tuple, _Facts] = {}
_FACTS_KEPT = 64


def _facts(path: str | os.PathLike) -> _Facts:
    """What fusegen reads from a library, parsed once per version of the file (its stat stamp:
    builds write a new file; a kernel per attribute value set loads one library again and again)."""
    try:
        st = os.stat(path)
        key = (os.path.realpath(path), st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
    except OSError:
        key = None
    hit = _FACTS.get(key) if key is not None else None
    if hit is not None:
        return hit
    elf = _read_elf(path)
    facts = _Facts(elf.e_type, tuple(_dynamic_symbols(elf)), tuple(_needed(elf)),
                   any(n in (".nv_fatbin", ".nvFatBinSegment") for n in elf.names))
    if key is not None:
        while len(_FACTS) >= _FACTS_KEPT:
            _FACTS.pop(next(iter(_FACTS)), None)
        _FACTS[key] = facts
    return facts


def check_shared_library(path: str | os.PathLike) -> None:
    """Raise ``LibraryError`` unless ``path`` is a complete ELF shared object (ET_DYN)."""
    if _facts(path).e_type != 3:
        raise LibraryError(f"{os.fspath(path)!r} is an ELF file but not a shared library")


def _linked_sections(elf: _Elf, section_type: int):
    """For each section of ``section_type``: its entry offsets and its linked string table."""
    for sh_type, off, size, link, entsize in elf.sections:
        if sh_type == section_type and entsize and link < len(elf.sections):
            _, str_off, str_size, _, _ = elf.sections[link]
            yield range(off, off + size - entsize + 1, entsize), elf.data[str_off:str_off + str_size]


def _c_string(table: bytes, offset: int) -> str | None:
    end = table.find(b"\0", offset)
    return table[offset:end].decode("utf-8", "replace") if 0 < offset < end else None


def dynamic_symbols(path: str | os.PathLike) -> list[str]:
    """Names in the library's dynamic symbol table, defined and undefined."""
    return list(_facts(path).symbols)


def _dynamic_symbols(elf: _Elf) -> list[str]:
    names = []
    for entries, strtab in _linked_sections(elf, 11):  # SHT_DYNSYM; st_name leads in ELF32 and ELF64
        for pos in entries:
            name = _c_string(strtab, struct.unpack_from(elf.endian + "I", elf.data, pos)[0])
            if name:
                names.append(name)
    return names


def has_cuda_code(path: str | os.PathLike) -> bool:
    """Whether the library carries CUDA device code (nvcc's ``.nv_fatbin`` section: cubins and/or PTX).

    ``AotKernel`` decides from this whether a kernel's parameters are device or host pointers:
    handing host pointers to a CUDA kernel, or device pointers to CPU code, would crash.
    """
    return _facts(path).cuda


def needed_libraries(path: str | os.PathLike) -> list[str]:
    """The sonames the library names as direct dependencies (its DT_NEEDED entries)."""
    return list(_facts(path).needed)


def _needed(elf: _Elf) -> list[str]:
    names = []
    for entries, strtab in _linked_sections(elf, 6):  # SHT_DYNAMIC: (d_tag, d_val) pairs
        for pos in entries:
            tag, value = struct.unpack_from(elf.endian + ("qQ" if elf.is64 else "iI"), elf.data, pos)
            name = _c_string(strtab, value) if tag == 1 else None  # DT_NEEDED
            if name:
                names.append(name)
    return names
