"""Positioned reads (``os.pread``) of byte ranges of a file: how a bounded reader copies the few
rows a query needs without mapping them into the process.

A page of a memory-mapped file that the process touches stays in its resident set until the
mapping goes (and the kernel maps the pages around a fault with it): reading a few hundred
scattered rows per query from a mapped 1.5 GB vector file grows the RSS towards the file's size
over a few hundred queries. A positioned read copies the bytes asked for and leaves the file's
pages in the shared page cache, outside the process's RSS.

Arrow IPC files are still opened memory-mapped for their metadata (schema, buffer layout): the
mapping is virtual address space only until a page is touched. :func:`mapped_base` and
:meth:`PositionedFile.offset_of` turn a zero-copy buffer of that mapping into its file offset, so
the bytes behind it can be read with :meth:`PositionedFile.read` instead of through the mapping.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

__all__ = ["PositionedFile", "mapped_base"]

_PREADV = getattr(os, "preadv", None)


def mapped_base(mapped: pa.MemoryMappedFile) -> int:
    """The address of byte 0 of ``mapped`` (its position is left at 0)."""
    mapped.seek(0)
    base = mapped.read_buffer(min(8, mapped.size())).address
    mapped.seek(0)
    return int(base)


class PositionedFile:
    """A file opened read-only and read by byte range (thread-safe: no shared file position).
    ``base``/``size``: the mapping of the same file whose buffers :meth:`offset_of` locates."""

    def __init__(self, path: Path | str, *, base: int = 0) -> None:
        self.path = Path(path)
        self._fd: int | None = os.open(str(self.path), os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size
        self.base = base

    def offset_of(self, buffer: pa.Buffer | None) -> int | None:
        """The file offset of a zero-copy ``buffer`` of the mapping at ``base`` (None when the
        buffer is not inside it: a copy, or absent)."""
        if buffer is None or not self.base:
            return None
        off = int(buffer.address) - self.base
        return off if 0 <= off and off + buffer.size <= self.size else None

    def _fileno(self) -> int:
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        return self._fd

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset``."""
        if length <= 0:
            return b""
        data = os.pread(self._fileno(), int(length), int(offset))
        if len(data) != length:
            raise OSError(f"{self.path}: {len(data)} of {length} bytes at offset {offset} (the file was truncated "
                          "or replaced while open; reopen the index)")
        return data

    def read_into(self, offsets: Sequence[int] | np.ndarray, lengths: Sequence[int] | np.ndarray) -> bytearray:
        """The ranges ``offsets[i]:offsets[i] + lengths[i]`` concatenated, each read straight into
        one output buffer (``os.preadv``; no intermediate copies)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        out = bytearray(int(lengths.sum()))
        view = memoryview(out)
        fd, at = self._fileno(), 0
        for off, n in zip(np.asarray(offsets, dtype=np.int64).tolist(), lengths.tolist()):
            if n <= 0:
                continue
            if _PREADV is not None:
                got = _PREADV(fd, [view[at:at + n]], off)
            else:  # a platform without preadv: one copy more
                data = os.pread(fd, n, off)
                got = len(data)
                view[at:at + got] = data
            if got != n:
                raise OSError(f"{self.path}: {got} of {n} bytes at offset {off} (the file was truncated or replaced "
                              "while open; reopen the index)")
            at += n
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass
