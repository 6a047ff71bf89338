"""The metrics file read without trusting it: bounded memory, no FIFO, no link, no hang."""

from __future__ import annotations

import os
import threading
import time
import tracemalloc
from pathlib import Path

from spotsweep.services.agent.lines import BadLine
from spotsweep.services.agent.tail import Tail

MiB = 1 << 20


def read_all(tail: Tail, final: bool = True) -> list[tuple[int, str | BadLine]]:
    out = tail.read(final=final)
    while tail.behind:
        out += tail.read(final=final)
    return out


def peak_while(fn) -> int:  # type: ignore[no-untyped-def]
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_over_long_line_is_reported_once_and_the_next_lines_are_read(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    f.write_bytes(b'{"step": 1, "a": 1}\n' + b"x" * (3 * 4096) + b'\n{"step": 2, "a": 2}\n')
    items = read_all(Tail(f, line_bytes=4096, per_call=1024))
    assert [n for n, _ in items] == [1, 2, 3]
    assert items[0][1] == '{"step": 1, "a": 1}' and items[2][1] == '{"step": 2, "a": 2}'
    bad = items[1][1]
    assert isinstance(bad, BadLine) and "longer than 4096 bytes" in bad.reason and bad.line.startswith("xxx")


def test_a_line_exactly_at_the_limit_passes(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    line = b'{"step": 1, "a": "' + b"x" * (4096 - 20) + b'"}'
    assert len(line) == 4096
    f.write_bytes(line + b"\n")
    assert read_all(Tail(f, line_bytes=4096)) == [(1, line.decode())]


def test_a_30_mb_line_without_newline_is_never_held(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    with f.open("wb") as out:
        out.write(b'{"step": 1, "a": 1}\n')
        for _ in range(30):
            out.write(b"y" * MiB)
    tail = Tail(f)
    items: list[tuple[int, str | BadLine]] = []
    peak = peak_while(lambda: items.extend(read_all(tail, final=False)))
    assert items[0] == (1, '{"step": 1, "a": 1}')
    assert len(items) == 2 and isinstance(items[1][1], BadLine)  # reported once, when found
    assert peak < 6 * MiB, peak  # a chunk and at most line_bytes of the line, never the line
    with f.open("ab") as out:
        out.write(b'\n{"step": 2, "a": 2}\n')
    assert tail.read(final=True) == [(3, '{"step": 2, "a": 2}')]


def test_a_1_gib_sparse_file_costs_neither_memory_nor_time(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    f.write_bytes(b'{"step": 1, "a": 1}\n')
    with f.open("ab") as out:
        out.truncate(1 << 30)  # a gibibyte of hole, no newline
    tail = Tail(f)
    items: list[tuple[int, str | BadLine]] = []
    started = time.monotonic()
    peak = peak_while(lambda: items.extend(read_all(tail)))
    assert time.monotonic() - started < 5
    assert items[0] == (1, '{"step": 1, "a": 1}') and len(items) == 2 and isinstance(items[1][1], BadLine)
    assert peak < 6 * MiB, peak
    assert tail.offset == 1 << 30


def test_one_read_takes_at_most_per_call_bytes(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    f.write_bytes(b'{"step": 1}\n' * 10_000)  # 120 kB
    tail = Tail(f, per_call=16 * 1024)
    first = tail.read()
    assert tail.behind and 0 < len(first) <= 16 * 1024 // 12 + 1
    rest = read_all(tail)
    assert [n for n, _ in first + rest] == list(range(1, 10_001)) and not tail.behind


def test_a_fifo_in_place_of_the_file_is_refused_without_hanging(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    f.write_text('{"step": 1, "a": 1}\n')
    tail = Tail(f)
    assert tail.read() == [(1, '{"step": 1, "a": 1}')]
    f.unlink()
    os.mkfifo(f)  # nobody ever writes: a blocking open() would wait forever
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(tail.read(final=True)), daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "reading a FIFO hung"
    assert result == [[]] and tail.refused is not None and "FIFO" in tail.refused
    assert tail.read() == []  # not opened again


def test_a_symbolic_link_or_a_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    target.write_text('{"step": 1, "a": 1}\n')
    link = tmp_path / "m.jsonl"
    link.symlink_to(target)
    tail = Tail(link)
    assert tail.read() == [] and tail.refused is not None and "symbolic link" in tail.refused
    d = tmp_path / "d.jsonl"
    d.mkdir()
    tail = Tail(d)
    assert tail.read() == [] and tail.refused is not None and "directory" in tail.refused


def test_blank_lines_are_skipped_but_counted(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    f.write_text('\n  \n{"step": 1}\n')
    assert read_all(Tail(f)) == [(3, '{"step": 1}')]
