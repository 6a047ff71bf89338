"""Templates in a spec: trial names and the trial's argv.

Both are ``str.format`` templates whose fields name parameters, e.g.
``"--lr={lr}"`` or ``"exp_{index:03d}"``. Argv is filled element by element
and handed to ``exec`` as a list: no shell ever sees it, so a parameter value
cannot inject a command, and an element never splits into two.

Floats render in their shortest round-tripping form (``repr``: 0.0001 ->
``"0.0001"``, 1e-05 -> ``"1e-05"``), so ``float(argv[i])`` in the trial script
gives back exactly the sampled value. Literal braces are written ``{{``/``}}``.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spotsweep.shared.errors import SpecError

if TYPE_CHECKING:  # spec imports this module; at run time we only need attributes
    from spotsweep.shared.spec import SweepSpec

_FORMATTER = string.Formatter()
_NUMBER = re.compile(r"\d+")
MAX_WIDTH = 1000  # a format spec's width or precision: past it, a template is a way to allocate memory
ARG_CHARS = 65536  # one argv element (Linux refuses one past 128 KiB)


def _fields(template: str) -> Iterable[tuple[str, str]]:
    """``(field_name, format_spec)`` of every field, nested specs included; ValueError if malformed."""
    for _literal, field, format_spec, _conversion in _FORMATTER.parse(template):
        if field is None:
            continue
        yield field, format_spec or ""
        if format_spec and "{" in format_spec:  # "{lr:{width}}": width is a field too
            yield from _fields(format_spec)


def placeholders(template: str) -> set[str]:
    """The field names a template uses: ``"--lr={lr:.3g}"`` -> ``{"lr"}``; ValueError if malformed."""
    return {field for field, _spec in _fields(template)}


def check_template(template: str, samples: Mapping[str, Sequence[Any]], max_chars: int = ARG_CHARS) -> list[str]:
    """Why ``template`` would fail to render, as messages; empty when it is fine.

    ``samples`` maps each known field to values it can take (for a choice all
    of them, for a range its bounds), so that a format spec that cannot format
    a value (``{lr:03d}`` for a float ``lr``) is refused when the spec is
    loaded rather than when the hundredth trial is planned. A rendering longer
    than ``max_chars`` is refused too (a trial name travels in the
    environment: ``{index:>10000000}`` would fail every trial with "Argument
    list too long"), and so is a width or precision past :data:`MAX_WIDTH`
    before anything is rendered with it.
    """
    try:
        fields = list(_fields(template))
    except ValueError as e:
        return [f"malformed template {template!r}: {e} (write {{{{ and }}}} for literal braces)"]
    known = ", ".join(sorted(samples))
    problems = [why for field, format_spec in fields
                if (why := _field_problem(template, field, format_spec, samples, known)) is not None]
    if problems:
        return problems
    why = _render_problem(template, samples, max_chars)
    return [why] if why is not None else []


def _field_problem(template: str, field: str, format_spec: str, samples: Mapping[str, Sequence[Any]],
                   known: str) -> str | None:
    """Why one placeholder of ``template`` is refused (not a parameter's name, a width past MAX_WIDTH, a
    spec that cannot format a sample value); None when it is fine."""
    if field == "" or field.isdigit():
        return f"positional placeholder {{{field}}} in {template!r}; name a parameter (known: {known})"
    if not field.isidentifier() and not field.replace("-", "_").isidentifier():
        # Attribute and index access ({lr.real}, {lr[0]}) reach into objects: refused.
        return f"placeholder {{{field}}} must be a plain parameter name"
    if field not in samples:
        return f"placeholder {{{field}}} names no parameter (known: {known})"
    if not format_spec or "{" in format_spec:
        return None
    wide = [int(n) for n in _NUMBER.findall(format_spec) if int(n) > MAX_WIDTH]
    if wide:
        return f"width or precision {wide[0]} in {{{field}:{format_spec}}} is too large (at most {MAX_WIDTH})"
    for value in samples[field]:
        try:
            format(value, format_spec)
        except (ValueError, TypeError) as e:
            return f"cannot format {field}={value!r} with {format_spec!r}: {e}"
    return None


def _render_problem(template: str, samples: Mapping[str, Sequence[Any]], max_chars: int) -> str | None:
    """Why ``template`` cannot be rendered, or renders past ``max_chars``; None when it renders.

    Rendered for real with every sample value of each field (the others at their first): conversions
    (!r, !s) and nested specs ({x:{w}}) are checked by the same code that renders trials."""
    first = {k: v[0] for k, v in samples.items() if v}
    try:
        longest = len(_FORMATTER.vformat(template, (), first))
    except (ValueError, TypeError, KeyError, IndexError) as e:
        return f"cannot render {template!r}: {e}"
    for field, values in samples.items():
        for value in values:
            try:
                longest = max(longest, len(_FORMATTER.vformat(template, (), {**first, field: value})))
            except (ValueError, TypeError, KeyError, IndexError) as e:
                return f"cannot render {template!r} with {field}={value!r}: {e}"
    if longest > max_chars:
        return f"renders to {longest} characters (at most {max_chars}): {template[:80]!r}"
    return None


def render(template: str, values: Mapping[str, Any], field: str = "command") -> str:
    """Fill one template; ``field`` names it in the SpecError an unknown placeholder raises
    (validation refuses those: the template or the values did not come from a validated spec)."""
    try:
        # format(float, "") is repr in Python 3: shortest round-tripping form.
        return template.format_map(values)
    except KeyError as e:
        raise SpecError([(field, f"placeholder {{{e.args[0]}}} names no parameter")]) from e


def render_argv(command: Sequence[str], params: Mapping[str, Any], extra: Mapping[str, Any] | None = None) -> list[str]:
    """The argv of one trial: each element of ``command`` filled from params and ``extra``
    (the built-ins ``index``, ``trial_name``; params win a clash, which validation refuses anyway)."""
    values = {**(extra or {}), **params}
    return [render(arg, values) for arg in command]


def trial_name(spec: SweepSpec, index: int, params: Mapping[str, Any]) -> str:
    """``spec.trial_name`` rendered with params plus ``index`` and ``name`` (the sweep's)."""
    return render(spec.trial_name, {"index": index, "name": spec.name, **params}, field="trial_name")
