"""The reliability suite: hostile input, crashes, LLM faults, secrets, bad queries, full disks.

Run it alone with ``python -m pytest tests/reliability -m reliability``. The marker is
registered in pyproject.toml.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ top level: helpers (helpers.reliability), fake_llm_server
