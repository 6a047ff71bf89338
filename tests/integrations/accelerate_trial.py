"""The Accelerate recipe of docs/trial-contract.md as a test trial (issue 41): a plain loop that saves
with ``accelerator.save_state`` into ``trial.checkpoint_dir``, resumes with ``load_state``, and stops on SIGTERM.

``--sigterm-at K`` sends the process SIGTERM after step K on a fresh start (a preemption at a known step).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset

from spotsweep import trial

# -- the recipe ------------------------------------------------------------------------------------
stop = False


def on_sigterm(signum, frame):
    global stop
    stop = True  # save at the next step boundary


def latest_state():
    """The newest complete saved state (a folder with its ``done`` file), or None on a fresh start."""
    done = [p for p in trial.checkpoint_dir.glob("state-*") if (p / "done").exists()]
    return max(done, key=lambda p: int(p.name.removeprefix("state-")), default=None)


def save(accelerator, step):
    """A new folder per checkpoint: files the agent may still be uploading are never rewritten."""
    folder = trial.checkpoint_dir / f"state-{step}"
    accelerator.save_state(str(folder))
    (folder / "done").touch()
    for old in trial.checkpoint_dir.glob("state-*"):
        if old != folder:
            shutil.rmtree(old)
    trial.checkpoint_saved(step)
# --------------------------------------------------------------------------------------------------


def data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True).sin())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--save-every", type=int, default=7)
    ap.add_argument("--sigterm-at", type=int, default=None)
    a = ap.parse_args()
    set_seed(1)
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(trial.params.get("lr", 1e-2)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / a.steps)
    # A generator of its own: a DataLoader iterator draws its base seed from it, else from the global RNG,
    # which the resumed loop would then draw after load_state restored it (shifting every dropout mask).
    loader = DataLoader(data(48, 2), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0))
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    step = 0
    if (state := latest_state()) is not None:  # restored by the agent
        accelerator.load_state(str(state))
        step = int(state.name.removeprefix("state-"))
    signal.signal(signal.SIGTERM, on_sigterm)
    per_epoch = len(loader)
    while step < a.steps:
        epoch, skip = divmod(step, per_epoch)
        loader.set_epoch(epoch)  # the order is a function of the seed and the epoch
        for x, y in accelerator.skip_first_batches(loader, skip) if skip else loader:
            model.train()
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            trial.report(step, loss=loss.item())
            if step == a.sigterm_at and trial.resume_step is None:
                os.kill(os.getpid(), signal.SIGTERM)
            if stop or step % a.save_every == 0:
                save(accelerator, step)
            if stop:
                raise SystemExit(143)
            if step == a.steps:
                break
    model.eval()
    with torch.no_grad():
        x, y = data(64, 3).tensors
        trial.report(step, eval_loss=torch.nn.functional.mse_loss(model(x), y).item())


if __name__ == "__main__":
    main()
