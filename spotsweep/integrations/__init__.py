"""Adapters that make a framework's training script a spotsweep trial (docs/integrations.md).

Each submodule imports its framework (``spotsweep.integrations.transformers``
needs the ``hf`` extra); this package imports none, and nothing else in
spotsweep imports them, so the control plane and agents install without them.
"""
