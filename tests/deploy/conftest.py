"""tests/deploy: the images, the compose file and the Kubernetes overlays, read as their tools read them."""

from __future__ import annotations

import os
import sys

# manifests.py: rendering and walking helpers, imported by name as tests/support's are.
sys.path.insert(0, os.path.dirname(__file__))
