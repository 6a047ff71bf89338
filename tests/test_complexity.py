"""No block in services/ or shared/ ranks above C in cyclomatic complexity (radon's ranks: D is 21 and up)
unless a ``# complexity: <why it stays one block>`` comment sits directly above its ``def`` (or its
decorators): a block that grows past C is split, or says why splitting would scatter one idea."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_rank, cc_visit
from radon.visitors import Class, Function

ROOT = Path(__file__).resolve().parents[1]
WHY = "# complexity:"
WORST_ALLOWED = "C"


def _blocks(blocks: list[Function | Class]) -> Iterator[Function | Class]:
    """Every function, method and class radon found, and the functions nested in them (radon counts a
    closure apart from the function holding it)."""
    for block in blocks:
        yield block
        if isinstance(block, Function):
            yield from _blocks(block.closures)


def _said_why(lines: list[str], lineno: int) -> bool:
    """Whether the line above the block's ``def`` (its decorators skipped) is a ``# complexity:`` comment."""
    above = lineno - 2
    while above >= 0 and lines[above].lstrip().startswith("@"):
        above -= 1
    return above >= 0 and lines[above].lstrip().startswith(WHY)


def offenders(root: Path, *folders: str) -> list[str]:
    """``path:line name rank(score)`` of each block above WORST_ALLOWED without a ``# complexity:`` comment."""
    found = []
    for path in sorted(p for folder in folders for p in (root / folder).rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for block in _blocks(cc_visit(source)):
            rank = cc_rank(block.complexity)
            if rank > WORST_ALLOWED and not _said_why(lines, block.lineno):
                found.append(f"{path.relative_to(root)}:{block.lineno} {block.fullname} {rank}({block.complexity})")
    return found


def test_no_block_in_services_or_shared_ranks_above_c_without_saying_why() -> None:
    bad = offenders(ROOT, "services", "shared")
    assert not bad, "split these, or put `# complexity: <why it stays one block>` above the def:\n" + "\n".join(bad)


def test_a_complex_block_is_named_unless_a_comment_says_why(tmp_path: Path) -> None:
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(25))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "tangled.py").write_text(f"def tangled(x):\n{branches}    return -1\n")
    (tmp_path / "pkg" / "said.py").write_text(f"# complexity: one table of cases\n@staticmethod\ndef said(x):\n"
                                              f"{branches}    return -1\n")
    assert offenders(tmp_path, "pkg") == ["pkg/tangled.py:1 tangled D(26)"]
