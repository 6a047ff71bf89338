"""The torch training harness (exact resume, mixed precision, the tiny
DeepSeek-style example model) lives here; it ships with the ``[worker]``
extra. Until it lands, ``examples/mlp/train.py`` is the reference trial script.
"""
