"""Local mode: `spotsweep run` and `resume` run the planner, an agent and the collector in one process over
an in-process broker and the embedded PostgreSQL (run.py), stopped and resumed safely (interrupt.py,
resume.py), with a progress bar (progress.py) and extensions left for them by `extend` (spool.py)."""
