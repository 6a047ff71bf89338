"""Models that ship with the trainer: ``tinylm``, the tiny DeepSeek-style language model, and its MoE layer."""
