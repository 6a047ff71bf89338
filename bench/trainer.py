"""The trainer's speed: tokens/s and model FLOPs utilisation (MFU) of the tiny
DeepSeek-MoE model (``spotsweep train tinylm``), eager and under ``torch.compile``.

Each run is the trainer's own loop, ``spotsweep.trainer.loop.fit``, on the built-in
corpus: the real model, data loader, autocast, optimizer step and gradient
clipping, nothing re-implemented here. Its per-step ``tokens_per_s`` (training
alone: evaluation and checkpoints are outside its window) is read through the
reporter; the first ``--warmup`` steps (the ``torch.compile`` compilation, the
allocator's and the data loader's start) are reported apart as the warm-up time a
trial pays at every attempt, and tokens/s is over the ``--steps`` after them.

Modes: ``eager`` and ``compile``, the trainer's ``--compile``. The trainer sets
dynamo's ``capture_dynamic_output_shape_ops`` for it: the MoE layer's
``torch.where`` over each expert's tokens has a data-dependent shape, which
otherwise breaks the graph inside the loop over blocks, and dynamo then fell back
to eager for the whole model forward, compiled only pieces and recompiled during
training (before that change, compiled training ran at 0.40x eager here, cold).
Graph breaks are counted per run.

Precision is the trainer's ``--amp`` (default ``auto``: bf16 autocast on a GPU,
fp32 on the CPU; ``--amp bf16`` on a CPU with AMX is worth a look). Attention is
``F.scaled_dot_product_attention``; the fused kernel that actually ran is recorded
per size. FLOPs per token and the peak are in ``bench/trainer_flops.py``: MFU is
model FLOPs (6 x active parameters + the attention term) per second over the
GPU's datasheet dense bf16 peak, or ``--peak-tflops``; on a CPU, over the
measured matmul ceiling (there is no datasheet figure for a share of a virtual
machine's cores), which is also reported on a GPU as a second, achievable, peak.

Sizes: ``small`` is a trial of examples/deepseek-small.yaml, ``grid`` the largest
of examples/deepseek-grid.yaml (8 layers, batch 128), ``wide`` a model big enough
to keep a GPU busy (not a shipped example), ``tiny`` a smoke size. Every round
runs each mode of a size in turn (interleaved, so speed-ups are same-run ratios);
the median over ``--repeat`` rounds is reported with its range and the 1-minute
load average at each run's start. The first compiled run of a size pays the
whole compilation; later rounds find torch's on-disk caches (reported apart).

    python bench/trainer.py                 # CPU: size small, 1 thread, a few minutes
    python bench/trainer.py --quick         # tiny size, a few steps: a check that it works
    bench/trainer_gpu.sh                    # on a GPU machine: small, grid and wide, under 5 minutes
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import torch
import trainer_flops
from torch._dynamo.utils import counters

from spotsweep.trainer.config import TrainConfig
from spotsweep.trainer.loop import fit
from spotsweep.trainer.models import tinylm_task
from spotsweep.trainer.models.tinylm import TinyLM, TinyLMConfig
from spotsweep.trainer.precision import autocast, for_device, resolve_device

# name: (model flags, batch size); experts 4, top-k 2, 1 shared expert unless said (the examples' MoE)
SIZES: dict[str, tuple[dict[str, Any], int]] = {
    "tiny": ({"dim": 32, "heads": 2, "layers": 2, "seq_len": 32}, 8),
    "small": ({"dim": 96, "heads": 8, "layers": 2, "seq_len": 64}, 32),
    "grid": ({"dim": 96, "heads": 8, "layers": 8, "seq_len": 128}, 128),
    "wide": ({"dim": 768, "heads": 12, "layers": 8, "seq_len": 1024, "experts": 8}, 16),
}


class Steps:
    """The reporter ``fit`` writes to: keeps each step's ``tokens_per_s``."""

    def __init__(self) -> None:
        self.tokens_per_s: list[float] = []

    def report(self, step: int, **metrics: float) -> None:
        if "tokens_per_s" in metrics:
            self.tokens_per_s.append(metrics["tokens_per_s"])

    def checkpoint_saved(self, step: int) -> None:
        pass


def check_flops(size: str, device: torch.device, amp: str) -> dict[str, Any]:
    """The analytic FLOPs per token of ``size`` and torch's count of one real forward and backward."""
    shape, _ = SIZES[size]
    model = TinyLM(TinyLMConfig(**shape)).to(device)
    precision = for_device(device, amp)  # type: ignore[arg-type]
    idx = torch.randint(0, model.cfg.vocab, (1, model.cfg.seq_len + 1), device=device)

    def step() -> None:
        with autocast(device, precision):
            loss, _ = model.loss(idx[:, :-1], idx[:, 1:])
        loss.backward()

    flops = trainer_flops.model_flops(model)
    counted = trainer_flops.torch_count(step, model.cfg.seq_len)
    flops["torch_count"] = counted
    flops["matmul_vs_torch"] = flops["matmul_per_token"] / counted["matmul_per_token"]
    return flops


# How the model runs: eager, and torch.compile as the trainer does it (--compile).
MODES = ("eager", "compile")


def one_run(size: str, mode: str, args: argparse.Namespace, data_dir: Path, tmp: Path) -> dict[str, Any]:
    """One ``fit`` of ``--warmup`` + ``--steps`` steps; tokens/s after the warm-up."""
    shape, batch = SIZES[size]
    model_cfg = TinyLMConfig(**shape)
    steps = args.warmup + args.steps
    cfg = TrainConfig(steps=steps, eval_every=steps, ckpt_every=steps, log_every=1, batch_size=batch,
                      device=args.device, compile=mode != "eager", threads=args.threads, amp=args.amp)
    torch._dynamo.reset()  # a fresh model per run: without this, runs pile up recompilations to dynamo's limit
    counters["graph_break"].clear()
    rec = Steps()
    load = harness.load_1m()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=tmp) as ckpts:
        fit(cfg, lambda: tinylm_task.build(model_cfg, cfg, None, data_dir, batch), reporter=rec,
            checkpoint_dir=Path(ckpts))
    wall = time.perf_counter() - t0
    per_step = model_cfg.seq_len * batch
    seconds = [per_step / tps for tps in rec.tokens_per_s]
    measured = seconds[args.warmup:]
    breaks = counters["graph_break"]
    return {"size": size, "mode": mode, "tokens_per_step": per_step, "load": load, "wall_s": wall,
            "first_step_s": seconds[0], "warmup_s": sum(seconds[:args.warmup]),
            "tokens_per_s": per_step * len(measured) / sum(measured), "step_ms": 1000 * statistics.median(measured),
            "graph_breaks": sum(breaks.values()), "graph_break_reasons": [" ".join(str(k).split())[:200] for k in breaks][:3],
            "step_s": [round(x, 5) for x in seconds]}


def try_run(size: str, mode: str, args: argparse.Namespace, data_dir: Path, tmp: Path) -> dict[str, Any]:
    """``one_run``; a compiled run that fails is recorded as skipped, with the reason, not raised."""
    if mode == "eager":
        return one_run(size, mode, args, data_dir, tmp)
    try:
        return one_run(size, mode, args, data_dir, tmp)
    except Exception as e:  # any failure of torch.compile (no compiler, an unsupported op): reported, not fatal
        reason = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        return {"size": size, "mode": mode, "skipped": reason}


def peaks(device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    """The peak MFU is taken against, where it comes from, and the measured matmul ceiling."""
    dtype = for_device(device, args.amp).autocast_dtype or torch.float32  # type: ignore[arg-type]
    torch.set_num_threads(args.threads)
    ceiling = trainer_flops.matmul_ceiling(device, dtype)
    sheet, name = trainer_flops.datasheet_peak(device)
    if args.peak_tflops:
        peak, source = args.peak_tflops, "--peak-tflops"
    elif sheet is not None:
        peak, source = sheet, "datasheet, dense bf16"
    else:
        peak, source = ceiling, f"measured {str(dtype).removeprefix('torch.')} matmul ceiling"
    return {"device": name, "device_type": device.type, "dtype": str(dtype).removeprefix("torch."), "threads": args.threads,
            "peak_tflops": peak, "peak_source": source, "datasheet_tflops": sheet, "matmul_ceiling_tflops": ceiling}


def rows(runs: list[dict[str, Any]], flops: dict[str, dict[str, Any]], peak: dict[str, Any]) -> list[list[Any]]:
    out = []
    for size in flops:
        for mode in MODES:
            rs = [r for r in runs if r["size"] == size and r["mode"] == mode and "skipped" not in r]
            if not rs:
                continue
            tps = harness.summary([r["tokens_per_s"] for r in rs])
            tflops = tps["median"] * flops[size]["per_token"] / 1e12
            out.append([size, mode, rs[0]["tokens_per_step"], tps["median"], f"{tps['min']:,.0f}-{tps['max']:,.0f}",
                        statistics.median(r["step_ms"] for r in rs), tflops, f"{100 * tflops / peak['peak_tflops']:.3g}%",
                        f"{100 * tflops / peak['matmul_ceiling_tflops']:.3g}%", rs[0]["warmup_s"],
                        statistics.median(r["warmup_s"] for r in rs[1:]) if len(rs) > 1 else "-",
                        statistics.median(r["graph_breaks"] for r in rs), ", ".join(f"{r['load']:.1f}" for r in rs)])
    return out


def speedups(runs: list[dict[str, Any]], sizes: list[str]) -> dict[str, Any]:
    """Each compiled mode against eager, tokens/s per size: the median of the per-round ratios."""
    out: dict[str, Any] = {}
    for size in sizes:
        eager = [r for r in runs if r["size"] == size and r["mode"] == "eager"]
        for mode in MODES[1:]:
            comp = [r for r in runs if r["size"] == size and r["mode"] == mode]
            pairs = [c["tokens_per_s"] / e["tokens_per_s"] for e, c in zip(eager, comp) if "skipped" not in c]
            out[f"{size} {mode}"] = {"median": statistics.median(pairs), "per_round": pairs} if pairs else None
    return out


def measure(args: argparse.Namespace, runs: list[dict[str, Any]], payload: dict[str, Any]) -> dict[str, str]:
    """Every size, ``--repeat`` rounds of each mode in turn; the modes skipped per size, and why.

    Compilation caches start empty, as on a fresh spot node: the first compiled run
    of a size pays a cold compilation, later rounds a warm one (a resumed attempt
    on the same node).
    """
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as t:
        tmp = Path(t)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "inductor")
        os.environ["TRITON_CACHE_DIR"] = str(tmp / "triton")
        for size in args.sizes:
            for r in range(args.repeat):
                for mode in args.modes:
                    if f"{size} {mode}" in skipped:
                        continue
                    run = try_run(size, mode, args, tmp / "data", tmp)
                    runs.append(run)
                    if "skipped" in run:
                        skipped[f"{size} {mode}"] = run["skipped"]
                        print(f"  {size} {mode}: skipped, torch.compile failed: {run['skipped']}", flush=True)
                        continue
                    print(f"  {size} {mode} round {r + 1}: {run['tokens_per_s']:,.0f} tokens/s, warm-up "
                          f"{run['warmup_s']:.1f} s, {run['graph_breaks']} graph break(s) (load {run['load']:.1f})",
                          flush=True)
                    harness.write_json("trainer", payload, args.json)  # after every run: a cut-off run keeps its figures
    return skipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", choices=list(SIZES), help="default: small on a CPU; small, grid, wide on a GPU")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="default: both, in this order")
    ap.add_argument("--no-compile", action="store_true", help="eager runs only (--modes eager)")
    ap.add_argument("--device", default="auto", help="the trainer's --device: auto (cuda when available), cpu, cuda")
    ap.add_argument("--amp", default="auto", choices=["auto", "bf16", "fp16", "fp32"], help="the trainer's --amp")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (the trainer's default: trials run side by side)")
    ap.add_argument("--warmup", type=int, default=10, help="steps before the measurement (compilation happens here)")
    ap.add_argument("--steps", type=int, default=20, help="measured steps per run")
    ap.add_argument("--repeat", type=int, default=2, help="rounds; each runs every mode of a size in turn")
    ap.add_argument("--peak-tflops", type=float, help="the peak MFU is taken against (default: datasheet, see --help)")
    ap.add_argument("--quick", action="store_true", help="smoke run: size tiny, 2 + 3 steps, one round")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.warmup, args.steps, args.repeat = args.sizes or ["tiny"], 2, 3, 1
    if args.no_compile:
        args.modes = ["eager"]
    device = resolve_device(args.device)
    args.sizes = args.sizes or (["small", "grid", "wide"] if device.type == "cuda" else ["small"])
    peak = peaks(device, args)
    print(f"device: {peak['device']} ({device.type}, {peak['dtype']}, {args.threads} thread(s)); peak "
          f"{peak['peak_tflops']:.4g} TFLOP/s ({peak['peak_source']}); matmul ceiling {peak['matmul_ceiling_tflops']:.4g} "
          f"TFLOP/s; torch {torch.__version__}", flush=True)
    flops = {size: check_flops(size, device, args.amp) for size in args.sizes}
    for size, f in flops.items():
        kernels = ", ".join(f["torch_count"]["sdpa_kernels"]) or "none: attention ran unfused (SDPA's math fallback)"
        print(f"{size}: {f['per_token'] / 1e6:.3g} MFLOP/token ({100 * f['attention_share']:.0f}% attention), active "
              f"{f['params']['active']:,} of {f['params']['total']:,} parameters; 6 x active = "
              f"{f['matmul_vs_torch']:.4f} x torch's matmul count; SDPA kernel: {kernels}", flush=True)
    runs: list[dict[str, Any]] = []
    payload: dict[str, Any] = {"args": vars(args) | {"json": str(args.json)}, "peak": peak, "flops": flops, "runs": runs,
                               "torch": torch.__version__}
    skipped = measure(args, runs, payload)
    payload["compile_speedup"] = speedups(runs, args.sizes)
    print(harness.table(
        f"trainer: tinylm on {peak['device']}, {peak['dtype']}, {args.threads} thread(s), {args.steps} steps after "
        f"{args.warmup} warm-up, {args.repeat} round(s); MFU against {peak['peak_tflops']:.4g} TFLOP/s "
        f"({peak['peak_source']}), and against the measured matmul ceiling {peak['matmul_ceiling_tflops']:.4g}",
        ["size", "mode", "tokens/step", "tokens/s", "range", "ms/step", "TFLOP/s", "MFU", "MFU (ceiling)",
         "warm-up s, 1st", "warm-up s, later", "graph breaks", "load per round"], rows(runs, flops, peak)))
    for key, s in payload["compile_speedup"].items():
        if s:
            per_round = ", ".join(f"{x:.2f}" for x in s["per_round"])
            print(f"{key} / eager tokens/s: {s['median']:.2f}x (per round: {per_round})")
        elif key in skipped:
            print(f"{key} / eager tokens/s: not measured: {skipped[key]}")
    print(f"wrote {harness.write_json('trainer', payload, args.json)}")


if __name__ == "__main__":
    main()
