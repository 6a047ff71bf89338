"""A Hugging Face Trainer script that is a complete spotsweep trial (issue 41), for the tests.

A tiny ``DeepseekV3ForCausalLM`` built from a config (no download), trained on
synthetic token ids. ``--sigterm-at K`` sends the process SIGTERM once global
step K ends on attempt 1 (a preemption at a known step); ``--sleep S`` sleeps S s after each step; ``--lora`` trains PEFT adapters on it; ``--no-callback`` runs
the plain Trainer, to compare; ``--save-steps``/``--max-steps`` size the run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import torch
from transformers import (DeepseekV3Config, DeepseekV3ForCausalLM, Trainer, TrainerCallback,
                          TrainingArguments)

from spotsweep import trial

VOCAB, SEQ = 64, 16


def tiny_model() -> DeepseekV3ForCausalLM:
    config = DeepseekV3Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        num_hidden_layers=2, first_k_dense_replace=1, num_attention_heads=2, num_key_value_heads=2,
        n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, n_group=1, topk_group=1,
        q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
        max_position_embeddings=SEQ, tie_word_embeddings=False, attention_dropout=0.1)
    torch.manual_seed(0)
    return DeepseekV3ForCausalLM(config)


def dataset(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Token ids that follow a simple rule (next = prev + 1 mod VOCAB, from a random start) plus noise."""
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, VOCAB, (n, 1), generator=g)
    ids = (starts + torch.arange(SEQ)) % VOCAB
    noise = torch.rand(n, SEQ, generator=g) < 0.1
    ids = torch.where(noise, torch.randint(0, VOCAB, (n, SEQ), generator=g), ids)
    return [{"input_ids": row, "labels": row.clone()} for row in ids]


class Slow(TrainerCallback):
    """Sleep after each step, so that a test's SIGTERM to the agent lands mid-run."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


class SigtermAt(TrainerCallback):
    """Preempt this process (SIGTERM to itself) when ``step`` ends, on the first attempt only."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step and trial.attempt == 1 and trial.resume_step is None:
            os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-steps", type=int, default=24)
    ap.add_argument("--save-steps", type=int, default=6)
    ap.add_argument("--sigterm-at", type=int, default=None)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--no-callback", action="store_true")
    ap.add_argument("--lora", action="store_true", help="train LoRA adapters (peft) on the base")
    ap.add_argument("--output-dir", default=None)
    ap.add_argument("--save-strategy", default="steps")
    ap.add_argument("--out", default=None, help="write the final eval metrics here as JSON")
    a = ap.parse_args(argv)
    callbacks: list[TrainerCallback] = [SigtermAt(a.sigterm_at)] if a.sigterm_at else []
    callbacks += [Slow(a.sleep)] if a.sleep else []
    if not a.no_callback:
        from spotsweep.integrations.transformers import SpotsweepCallback
        callbacks.append(SpotsweepCallback())
    args = TrainingArguments(
        output_dir=a.output_dir or str(trial.checkpoint_dir), max_steps=a.max_steps,
        save_strategy=a.save_strategy, save_steps=a.save_steps, save_total_limit=1,
        eval_strategy="steps", eval_steps=a.save_steps, logging_steps=2,
        learning_rate=float(trial.params.get("lr", 3e-3)), warmup_steps=4, weight_decay=0.01,
        per_device_train_batch_size=4, gradient_accumulation_steps=2, per_device_eval_batch_size=16,
        seed=1, data_seed=2, use_cpu=True, report_to=[], disable_tqdm=True, dataloader_num_workers=0)
    model = tiny_model()
    if a.lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1,
                                                 target_modules=["kv_b_proj", "o_proj"]))
    trainer = Trainer(model=model, args=args, train_dataset=dataset(40, 3), eval_dataset=dataset(32, 4),
                      callbacks=callbacks)
    trainer.train(resume_from_checkpoint=trial.resume_step is not None)
    final = trainer.evaluate()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(final, f)
    print(json.dumps(final), file=sys.stderr)


if __name__ == "__main__":
    main()
