"""What a metrics message costs on the wire, per point: the agent building and
encoding it, the collector decoding it. Today's ``TrialMetrics`` (one
pydantic model per point) against two layouts proposed for phase 2 (defined
here only to measure them): points as ``[step, name, value]`` triples, and
columns (``steps``, ``names``, ``values``). Same 2,000 points (the agent's
batch), same pydantic, same validation of types.

    python bench/points_wire.py --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
from pydantic import BaseModel, ConfigDict

from spotsweep.shared.messages import MetricPoint, TrialMetrics, decode, encode


class Triples(BaseModel):
    model_config = ConfigDict(frozen=True, ser_json_inf_nan="constants")
    points: list[tuple[int, str, float]]


class Columns(BaseModel):
    model_config = ConfigDict(frozen=True, ser_json_inf_nan="constants")
    steps: list[int]
    names: list[str]
    values: list[float]


def lines(n_points: int) -> list[tuple[int, dict[str, float]]]:
    return [(s, {f"m{j}": s * 0.001 + j for j in range(10)}) for s in range(n_points // 10)]


def today(parsed: list[tuple[int, dict[str, float]]]) -> bytes:
    points = [MetricPoint(step=s, name=k, value=v) for s, vals in parsed for k, v in vals.items()]
    return encode(TrialMetrics(sweep_id="s", trial_id="s.1", attempt=1, points=points))


def triples(parsed: list[tuple[int, dict[str, float]]]) -> bytes:
    return Triples(points=[(s, k, v) for s, vals in parsed for k, v in vals.items()]).model_dump_json().encode()


def columns(parsed: list[tuple[int, dict[str, float]]]) -> bytes:
    steps, names, values = [], [], []
    for s, vals in parsed:
        for k, v in vals.items():
            steps.append(s)
            names.append(k)
            values.append(v)
    return Columns(steps=steps, names=names, values=values).model_dump_json().encode()


def per_point_us(fn: Callable[[], Any], points: int, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t) / points * 1e6)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    parsed = lines(args.points)
    layouts: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]] = {
        "today: a model per point": (today, decode),
        "[step, name, value] triples": (triples, Triples.model_validate_json),
        "columns": (columns, Columns.model_validate_json),
    }
    rows, res = [], {}
    loops = 50
    for label, (build, parse) in layouts.items():
        body = build(parsed)
        enc = per_point_us(lambda b=build: [b(parsed) for _ in range(loops)], args.points * loops, args.repeat)
        dec = per_point_us(lambda p=parse, x=body: [p(x) for _ in range(loops)], args.points * loops, args.repeat)
        res[label] = {"agent_build_encode_us": enc, "collector_decode_us": dec, "bytes": len(body)}
        rows.append([label, enc, dec, len(body)])
    print(harness.table(f"metrics message of {args.points} points, per point (median of {args.repeat})",
                        ["layout", "agent us/point", "collector us/point", "bytes"], rows))
    base = res["today: a model per point"]
    for label, r in res.items():
        print(f"{label}: {base['agent_build_encode_us'] / r['agent_build_encode_us']:.1f}x agent, "
              f"{base['collector_decode_us'] / r['collector_decode_us']:.1f}x collector")
    harness.write_json("points_wire", {"args": vars(args) | {"json": str(args.json)}, "results": res}, args.json)


if __name__ == "__main__":
    main()
