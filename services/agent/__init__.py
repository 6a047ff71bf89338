"""The agent: runs trial processes on a node, one per slot (GPU)."""
