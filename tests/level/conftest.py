"""LevelRAG tests (tests/level). The top of tests/ is put on sys.path so the shared helpers
(helpers.level, helpers.llm, fake_llm_server) import by name."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
