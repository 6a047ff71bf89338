"""Write the hf-deepseek example's inputs: "pretrained" weights with their tokenizer, and a corpus.

    python examples/hf-deepseek/prepare.py            # into /tmp/spotsweep-hf-deepseek (what sweep.yaml names)
    python examples/hf-deepseek/prepare.py OUT        # elsewhere (then edit the spec's inputs)

Nothing is downloaded. ``OUT/weights`` is a small ``DeepseekV3ForCausalLM``
(multi-head latent attention, a dense first layer, then a mixture-of-experts
layer; ~100k parameters) built from a config with a fixed seed and saved with
``save_pretrained``, standing in for a real DeepSeek checkpoint: its weights
are random, so the LoRA fine-tune has everything to learn. Beside them, a
byte-level BPE tokenizer trained on the corpus with the ``tokenizers`` library,
saved as a ``PreTrainedTokenizerFast``, so ``AutoTokenizer.from_pretrained``
and ``AutoModelForCausalLM.from_pretrained`` load the folder as they load one
from the Hub. ``OUT/data`` holds ``train.txt`` and ``eval.txt``: sentences from
a small seeded grammar, one per line.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, PreTrainedTokenizerFast

DEFAULT_OUT = Path("/tmp/spotsweep-hf-deepseek")
EOS = "<|endoftext|>"
VOCAB = 384
SEQ = 32

_WHO = ["the cat", "a dog", "the old man", "a small girl", "the robot", "my friend", "the bird", "a farmer"]
_DID = ["saw", "found", "liked", "carried", "painted", "lost", "wanted", "fixed"]
_WHAT = ["a red ball", "the blue box", "an apple", "the green hat", "a tiny boat", "the map", "a warm coat"]
_WHERE = ["in the park", "at home", "by the river", "under the tree", "near the shop", "on the hill"]


def corpus(lines: int, seed: int) -> str:
    """Sentences from a seeded template grammar: structure a small model can learn in a few dozen steps."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        who, did, what, where = (rng.choice(words) for words in (_WHO, _DID, _WHAT, _WHERE))
        then = f" and then {rng.choice(_DID)} {rng.choice(_WHAT)}" if rng.random() < 0.4 else ""
        out.append(f"{who} {did} {what} {where}{then}.")
    return "\n".join(out) + "\n"


def tokenizer(text: str) -> PreTrainedTokenizerFast:
    """A byte-level BPE of ``VOCAB`` tokens trained on ``text``: any string encodes, nothing downloaded."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text.splitlines(), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS, model_max_length=SEQ)


def model(vocab_size: int) -> DeepseekV3ForCausalLM:
    """A DeepseekV3 small enough for a CPU: 2 layers (the first dense), 4 routed experts, 2 per token."""
    config = DeepseekV3Config(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        num_hidden_layers=2, first_k_dense_replace=1, num_attention_heads=2, num_key_value_heads=2,
        n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, n_group=1, topk_group=1,
        q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
        max_position_embeddings=SEQ, tie_word_embeddings=False)
    torch.manual_seed(0)
    return DeepseekV3ForCausalLM(config)


def prepare(out: Path) -> None:
    """Write ``out/weights`` (model and tokenizer) and ``out/data`` (train.txt, eval.txt)."""
    train, evaluation = corpus(600, seed=1), corpus(80, seed=2)
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "train.txt").write_text(train)
    (data / "eval.txt").write_text(evaluation)
    tok = tokenizer(train)
    net = model(len(tok))
    net.generation_config.eos_token_id = net.config.eos_token_id = tok.eos_token_id
    net.save_pretrained(out / "weights")
    tok.save_pretrained(out / "weights")
    params = sum(p.numel() for p in net.parameters())
    print(f"wrote {out}/weights ({params:,} parameters, vocabulary {len(tok)}) and {out}/data", file=sys.stderr)


if __name__ == "__main__":
    prepare(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
