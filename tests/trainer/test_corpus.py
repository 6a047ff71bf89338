"""The built-in corpus: the same bytes on every node, text a byte-level model can learn."""

from __future__ import annotations

from spotsweep.trainer import corpus


def test_deterministic_ascii_text_of_the_asked_size() -> None:
    a, b = corpus.build(50_000), corpus.build(50_000)
    assert a == b and len(a) == 50_000
    text = a.decode("ascii")
    assert text[:1].isupper() and "\n" in text
    assert corpus.build(60_000)[:50_000] == a  # a longer corpus extends the shorter one


def test_its_facts_are_consistent() -> None:
    text = corpus.build(200_000).decode()
    for name, place in zip(corpus.NAMES, corpus.PLACES):
        assert f"{name} lives in {place}." in text
        for other in corpus.PLACES:
            if other != place:
                assert f"{name} lives in {other}." not in text


def test_the_file_name_follows_the_content() -> None:
    assert corpus.name() == corpus.name() and corpus.name(1000) != corpus.name(2000)
    assert corpus.name().startswith(f"tinycorpus-v{corpus.VERSION}-")
