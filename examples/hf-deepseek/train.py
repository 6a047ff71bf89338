"""A LoRA fine-tune of a DeepseekV3 with the Hugging Face ``Trainer`` and ``peft``: a spotsweep trial as is.

    python examples/hf-deepseek/train.py --weights /tmp/spotsweep-hf-deepseek/weights \
        --data /tmp/spotsweep-hf-deepseek/data --lr 3e-3 --lora-rank 8     # standalone: checkpoints in ./checkpoints

Under spotsweep (``sweep.yaml``) the weights and the corpus are the spec's
``inputs``, linked at ``weights`` and ``data`` in the trial's folder (the
defaults), and ``SpotsweepCallback`` reports every log and evaluation,
announces each checkpoint, saves and exits on SIGTERM, and the next attempt
resumes from the checkpoint exactly (``trial.resume_step``). Gradient
checkpointing is on; bf16 where the GPU has it, else fp32 (a CPU). The first
attempt evaluates before training (``eval_on_start``): ``eval_loss`` at
step 0 is the untouched base's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import (AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase, Trainer, TrainingArguments,
                          set_seed)

from spotsweep import trial
from spotsweep.integrations.transformers import SpotsweepCallback

SEQ = 32
# Every nn.Linear: attention, the dense and shared-expert MLPs, lm_head (routed experts are fused tensors, frozen).
LORA_TARGETS = ["lm_head", "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def blocks(path: Path, tok: PreTrainedTokenizerBase) -> list[dict[str, torch.Tensor]]:
    """The file's lines, each ended by EOS, as one token stream cut into ``SEQ``-token examples."""
    ids: list[int] = []
    for line in path.read_text().splitlines():
        ids += tok(line)["input_ids"] + [tok.eos_token_id]
    rows = torch.tensor(ids[: len(ids) // SEQ * SEQ]).view(-1, SEQ)
    return [{"input_ids": row, "labels": row.clone()} for row in rows]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", default="weights", help="the base model's folder (save_pretrained)")
    ap.add_argument("--data", default="data", help="folder with train.txt and eval.txt")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=5, help="warmup steps")
    ap.add_argument("--batch-size", type=int, default=8, help="per device, per micro-batch")
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--eval-steps", type=int, default=10, help="evaluate and checkpoint every this many steps")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    cuda = torch.cuda.is_available()
    bf16 = cuda and torch.cuda.is_bf16_supported()
    tok = AutoTokenizer.from_pretrained(a.weights)
    set_seed(a.seed)  # the adapters' initialization: a trial run twice starts from the same one
    base = AutoModelForCausalLM.from_pretrained(a.weights, dtype=torch.bfloat16 if bf16 else torch.float32)
    model = get_peft_model(base, LoraConfig(r=a.lora_rank, lora_alpha=2 * a.lora_rank, lora_dropout=0.0,
                                            target_modules=LORA_TARGETS))
    args = TrainingArguments(
        output_dir=str(trial.checkpoint_dir), max_steps=a.max_steps, learning_rate=a.lr,
        warmup_steps=a.warmup, lr_scheduler_type="cosine", weight_decay=0.0,
        per_device_train_batch_size=a.batch_size, gradient_accumulation_steps=a.grad_accum,
        per_device_eval_batch_size=32, eval_strategy="steps", eval_steps=a.eval_steps,
        eval_on_start=trial.resume_step is None,  # a resumed attempt would evaluate the checkpoint's step again
        save_strategy="steps", save_steps=a.eval_steps, save_total_limit=1, logging_steps=5,
        gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False},
        bf16=bf16, use_cpu=not cuda, seed=a.seed, data_seed=a.seed, report_to=[], disable_tqdm=True,
        dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=blocks(Path(a.data) / "train.txt", tok),
                      eval_dataset=blocks(Path(a.data) / "eval.txt", tok), callbacks=[SpotsweepCallback()])
    trainer.train(resume_from_checkpoint=trial.resume_step is not None)


if __name__ == "__main__":
    main()
