"""Reading the trial's metrics file without trusting it.

The file belongs to the trial, which may do anything to it: write a line of
gigabytes with no newline, turn it into a sparse file of a terabyte, or
replace it with a FIFO, a directory or a symbolic link. The agent reading it
serves every other trial on the node, so :class:`Tail`

* opens the path without following a link and without blocking
  (``O_NOFOLLOW | O_NONBLOCK``), and reads it only if the opened file is a
  regular file; anything else is refused once (:attr:`Tail.refused`) and the
  file is not read again, so no thread ever waits in ``open()`` or ``read()``;
* reads at most ``per_call`` bytes per call, in chunks, with ``pread``;
* holds at most ``line_bytes`` of an unfinished line: a longer line is
  reported once as a :class:`~.lines.BadLine` and its bytes are dropped while
  the reader scans for its end, skipping holes of a sparse file without
  reading them.
"""

from __future__ import annotations

import errno
import os
import stat

from spotsweep.services.agent.lines import BadLine

CHUNK = 1 << 20  # bytes per pread
PER_CALL = 4 << 20  # bytes read by one call of Tail.read: one poll's worth
SHOWN = 120  # characters of an over-long line kept to say which it was

Item = tuple[int, str | BadLine]  # (line number in the file, the line or why it was dropped)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


class Tail:
    """Complete lines appended to the metrics file since the last read, read within bounds."""

    def __init__(self, path: os.PathLike[str] | str, line_bytes: int = 1 << 20, per_call: int = PER_CALL) -> None:
        self.path = os.fspath(path)
        self.line_bytes = line_bytes
        self.per_call = per_call
        self.refused: str | None = None  # why the file is no longer read
        self.behind = False  # the last read stopped at per_call with more to read
        self.offset = 0
        self._partial = bytearray()  # the unfinished line, at most line_bytes
        self._skipping = False  # inside an over-long line, dropping bytes up to its end
        self._lines = 0  # lines ended so far

    def read(self, final: bool = False) -> list[Item]:
        """New complete lines; with ``final`` (the trial has exited) also an
        unterminated last line, once the file has been read to its end."""
        self.behind = False
        fd = self._open()
        if fd is None:
            return []
        out: list[Item] = []
        try:
            size = os.fstat(fd).st_size
            budget = self.per_call
            while budget > 0 and self.offset < size:
                if self._skipping:
                    self._skip_hole(fd, size)
                    if self.offset >= size:
                        break
                chunk = os.pread(fd, min(CHUNK, budget), self.offset)
                if not chunk:
                    break
                self.offset += len(chunk)
                budget -= len(chunk)
                self._take(chunk, out)
            self.behind = self.offset < size
        finally:
            os.close(fd)
        if final and not self.behind:
            if self._partial.strip():
                out.append((self._lines + 1, bytes(self._partial).decode("utf-8", "replace")))
            self._partial.clear()
            self._skipping = False
        return out

    def _open(self) -> int | None:
        if self.refused is not None:
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None  # not written yet, or removed: nothing to read
        except OSError as e:
            what = "a symbolic link" if e.errno == errno.ELOOP else (e.strerror or str(e))
            self.refused = f"the metrics file was not read from byte {self.offset} on: it is {what}"
            return None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            self.refused = f"the metrics file was not read from byte {self.offset} on: the trial made it {_kind(mode)}"
            return None
        return fd

    def _skip_hole(self, fd: int, size: int) -> None:
        """Jump over a hole (a sparse file's unwritten bytes read as NUL, never a newline)."""
        try:
            self.offset = os.lseek(fd, self.offset, os.SEEK_DATA)
        except OSError as e:  # ENXIO: only a hole is left; EINVAL/no SEEK_DATA: read on
            if e.errno == errno.ENXIO:
                self.offset = size
        except AttributeError:  # pragma: no cover - no SEEK_DATA on this platform
            pass

    def _take(self, chunk: bytes, out: list[Item]) -> None:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._lines += 1
            if self._skipping:
                self._skipping = False  # the over-long line ends here; it was reported when found
            elif len(self._partial) + end - start > self.line_bytes:
                out.append((self._lines, self._too_long(chunk[start:end])))
            else:
                self._partial += chunk[start:end]
                if self._partial.strip():
                    out.append((self._lines, bytes(self._partial).decode("utf-8", "replace")))
            self._partial.clear()
            start = end + 1
        if self._skipping:
            return
        if len(self._partial) + len(chunk) - start > self.line_bytes:
            out.append((self._lines + 1, self._too_long(chunk[start:])))
            self._partial.clear()
            self._skipping = True
        else:
            self._partial += chunk[start:]

    def _too_long(self, rest: bytes) -> BadLine:
        head = (bytes(self._partial[:SHOWN]) + rest[:SHOWN])[:SHOWN].decode("utf-8", "replace")
        return BadLine(head, f"line is longer than {self.line_bytes} bytes (limits.line_bytes)")
