"""The reliability suite: hostile input, crashes, LLM faults, secrets, bad queries, full disks.

Run it alone with ``python -m pytest tests/reliability -m reliability``. The marker is
registered here until pyproject.toml lists it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ top level: helpers_reliability, fake_llm_server


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "reliability: the reliability suite (tests/reliability; docs/RELIABILITY.md)")
