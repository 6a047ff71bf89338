"""Into a sweep spec: YAML or JSON text, a file, or decoded data; errors as the user wrote them.

Every way in ends in :func:`parse_spec`. A failure is a :class:`SpecError`
whose ``(field, message)`` pairs carry dotted paths as written in the spec
(pydantic's union tags dropped) and messages naming the offending value.
Import from :mod:`spotsweep.shared.spec`, the public face.
"""

from __future__ import annotations

import difflib
import functools
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from spotsweep.shared.errors import SpecError
from spotsweep.shared.limits import ERROR_PROBLEMS, MAX_TOTAL_TRIALS
from spotsweep.shared.space import total_trials
from spotsweep.shared.spec_base import _Problems
from spotsweep.shared.spec_models import SweepSpec
from spotsweep.shared.spec_params import PARAM_TYPES
from spotsweep.shared.spec_search import stop_types, strategy_types


def parse_spec(data: object) -> SweepSpec:
    """Validate decoded data (a dict from YAML, JSON or a message body) into a spec."""
    _require_mapping(data, "")
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as e:
        raise _translate(e) from e
    except RecursionError as e:  # a body nested past Python's stack: no spec is that deep
        raise SpecError([("", "nested too deeply to be a spec")]) from e
    _countable(spec)
    return spec


def _countable(spec: SweepSpec) -> None:
    """Refuse a sweep larger than the planner and the database can count
    (``sweeps.total_trials`` is a bigint; trial indexes stay exact in a double)."""
    total = total_trials(spec)
    if total > MAX_TOTAL_TRIALS:
        where = "strategy.trials" if getattr(spec.strategy, "trials", None) else "space"
        raise SpecError([(where, f"the sweep would have {total:.3g} trials ({total} exactly); "
                                 f"at most 2^53 ({MAX_TOTAL_TRIALS}) can be counted: "
                                 "use strategy random, subset or a grid's max_trials")])


def load_spec(text: str | bytes, source: str = "<spec>") -> SweepSpec:
    """Parse YAML or JSON text (JSON is YAML) into a spec; ``source`` names it in errors."""
    data = yaml_load(text, source)
    _require_mapping(data, f"{source}: ")
    return parse_spec(data)


def _require_mapping(data: object, prefix: str) -> None:
    if not isinstance(data, Mapping):
        got = "an empty document" if data is None else type(data).__name__
        raise SpecError([("", f"{prefix}top level must be a mapping (got {got})")])


def load_spec_file(path: str | Path) -> SweepSpec:
    """Read and parse a spec file; a missing or unreadable file is a SpecError naming it."""
    try:
        text = Path(path).read_bytes()
    except FileNotFoundError as e:
        raise SpecError([("", f"{path}: no such file")]) from e
    except OSError as e:
        raise SpecError([("", f"{path}: cannot read: {e.strerror or e}")]) from e
    return _local_workdir(load_spec(text, source=str(path)), Path(path).parent)


def _local_workdir(spec: SweepSpec, spec_dir: Path) -> SweepSpec:
    """``workdir`` made absolute (it is relative to the spec file); it must be a folder here.

    Only a spec read from a file is checked: a spec in a message names a folder
    on the machine that submitted it, which the planner never reads."""
    if spec.workdir is None:
        return spec
    path = (spec_dir / Path(spec.workdir).expanduser()).resolve()
    if not path.exists():
        raise SpecError([("workdir", f"no such folder (got {spec.workdir!r}, looked for {path})")])
    if not path.is_dir():
        raise SpecError([("workdir", f"must be a folder, the trial's code (got {spec.workdir!r}: {path} is a file)")])
    return spec.model_copy(update={"workdir": str(path)})


class _Loader(yaml.SafeLoader):
    """safe_load, plus two fixes for specs: YAML 1.2 floats and no duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # PyYAML keeps the last of two equal keys; a repeated `lr:` in space is a mistake.
        seen: set[Any] = set()
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults`: merged by PyYAML, not a key of its own
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if not isinstance(key, (str, int, float, bool)):
                continue  # exotic keys: the model refuses them with a better message
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 reads `on`/`yes`/`off` as booleans, `010` as octal 8 and `1:30` as
# 90; a sweep over [on, off] or a zero-padded id would silently change. Keep
# YAML 1.2's core schema for bools and ints instead, as JSON users expect.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
                              list("-+0123456789"))


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)  # 010 is ten, as in JSON-minded YAML 1.2


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
# YAML 1.1 reads 1e-4 and 1.0e4 (no dot, or unsigned exponent) as strings; 1.2 and JSON read floats.
_Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                              re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
                              list("-+0123456789."))


def yaml_load(text: str | bytes, source: str = "<spec>") -> object:
    """Decode YAML (or JSON) text; a syntax error is a SpecError with line and column."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError([("", f"{source}: YAML syntax error{where}: {e.problem or e.context}")]) from e
    except yaml.YAMLError as e:  # reader errors: bad encoding, control characters
        raise SpecError([("", f"{source}: cannot read as YAML: {e}")]) from e


def _translate(error: ValidationError) -> SpecError:
    """pydantic's errors as (dotted path the user wrote, message naming the value)."""
    out: list[tuple[str, str]] = []
    for err in error.errors():
        loc, tag = _strip_tag(err["loc"])
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, _Problems):
            out += [(_path(loc + rel), msg) for rel, msg in cause.errors]
        else:  # past the problems an error shows, no "did you mean" (200,000 unknown keys: 40 s of difflib)
            extra, msg = _message(err, loc, tag, suggest=len(out) < ERROR_PROBLEMS)
            out.append((_path(loc + extra), msg))
    return SpecError(out)


def _strip_tag(loc: tuple[str | int, ...]) -> tuple[tuple[str | int, ...], str | None]:
    """Drop the union tag pydantic puts in paths: space.x.uniform.low -> space.x.low."""
    if len(loc) >= 3 and loc[0] == "space" and loc[2] in PARAM_TYPES:
        return loc[:2] + loc[3:], str(loc[2])
    if len(loc) >= 2 and loc[0] == "strategy" and loc[1] in strategy_types():
        return loc[:1] + loc[2:], str(loc[1])
    if len(loc) >= 2 and loc[0] == "early_stop" and loc[1] in stop_types():
        return loc[:1] + loc[2:], str(loc[1])
    return loc, None


def _expected(loc: tuple[str | int, ...]) -> str:
    """The types a union at ``loc`` takes, as registered now."""
    kinds = {"strategy": strategy_types(), "early_stop": stop_types()}
    return ", ".join(kinds.get(str(loc[0]) if loc else "", PARAM_TYPES))


def _message(err: Any, loc: tuple[str | int, ...], tag: str | None, suggest: bool = True) -> tuple[tuple[str, ...], str]:
    kind, value = err["type"], err.get("input")
    if kind == "extra_forbidden":
        near = difflib.get_close_matches(str(loc[-1]) if loc else "", known_keys(), n=1, cutoff=0.8) if suggest else []
        return (), f"unknown key (did you mean {near[0]!r}?)" if near else "unknown key"
    if kind == "missing":
        if tag is None:
            return (), "required"
        return (), f"required for {loc[0]} {tag}" if loc[0] in ("strategy", "early_stop") else f"required for type {tag}"
    if kind == "union_tag_invalid":
        return ("type",), f"unknown type {err['ctx']['tag']!r} (expected one of: {_expected(loc)})"
    if kind == "union_tag_not_found":
        return ("type",), f"required (one of: {_expected(loc)})"
    if kind == "value_error":
        return (), str(err["ctx"]["error"])
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return (), f"must be a mapping (got {_short(value)})"
    return (), f"{err['msg']} (got {_short(value)})"


@functools.cache
def known_keys() -> tuple[str, ...]:
    """Every key of every model a spec is made of (the strategies' and stoppers' as registered):
    what an unknown key may be a typo of (``max_concurent``: ``max_concurrent``)."""
    seen: set[type] = set()
    keys: set[str] = set()

    def walk(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation in seen:
                return
            seen.add(annotation)
            for name, field in annotation.model_fields.items():
                keys.add(field.alias or name)
                walk(field.annotation)
        for arg in typing.get_args(annotation):
            walk(arg)

    walk(SweepSpec)
    return tuple(sorted(keys))


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _path(loc: tuple[str | int, ...]) -> str:
    """('space', 'lr', 'values', 0) -> 'space.lr.values[0]'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
