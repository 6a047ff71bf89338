"""examples/hf-deepseek as its README runs it: prepare, validate, ``spotsweep run`` in local mode (issue 41).

A LoRA fine-tune of a tiny ``DeepseekV3ForCausalLM`` (random "pretrained"
weights from ``prepare.py``) with the Hugging Face Trainer, peft and
``SpotsweepCallback``, over lr x LoRA rank x warmup. The shipped spec names
``/tmp/spotsweep-hf-deepseek``; the test runs the same spec with its inputs'
``from`` pointed at the test's own folder, so two runs never share one, and
everything else as shipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hf-deepseek"


def test_the_lora_sweep_completes_and_every_trial_learns_from_the_base(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env |= {"SPOTSWEEP_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1"}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *argv], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=400)

    prepared = run(str(EXAMPLE / "prepare.py"), str(tmp_path / "assets"))
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (tmp_path / "assets" / "weights").iterdir()}
    shipped = run("-m", "spotsweep", "validate", str(EXAMPLE / "sweep.yaml"))
    assert shipped.returncode == 0, shipped.stderr

    spec = yaml.safe_load((EXAMPLE / "sweep.yaml").read_text())
    spec["command"][1] = str(EXAMPLE / spec["command"][1])  # train.py, as `run` resolves it next to the spec
    for item in spec["inputs"]:
        item["from"] = str(tmp_path / "assets" / item["to"])
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    ran = run("-m", "spotsweep", "run", "sweep.yaml")
    assert ran.returncode == 0, (ran.stdout[-2000:], ran.stderr[-3000:])

    trials = json.loads(run("-m", "spotsweep", "ls", "--json").stdout)
    assert len(trials) == 8 and all(t["state"] == "completed" for t in trials), [(t["trial_name"], t["state"],
                                                                                 t["error"]) for t in trials]
    monkeypatch.setenv("SPOTSWEEP_HOME", env["SPOTSWEEP_HOME"])
    import spotsweep

    points = spotsweep.results().sweep("hf-deepseek").points("eval_loss")
    assert sorted(set(points["step"])) == [0, 10, 20, 30]  # eval_on_start, then every --eval-steps
    untrained = points[points["step"] == 0]["value"]
    assert len(untrained) == 8 and untrained.nunique() == 1  # one base for every trial
    best = min(t["metrics"]["eval_loss"] for t in trials)
    assert best < untrained.iloc[0] - 1.0, (best, untrained.iloc[0])  # the adapters learn the corpus
