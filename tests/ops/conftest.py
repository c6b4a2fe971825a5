"""Operations tests (tests/ops): the corpus lock, concurrent writers, kills, scheduled runs.

The top of tests/ is put on sys.path so the shared helpers (helpers.reliability, helpers.ops,
fake_llm_server) import the way the reliability suite imports them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
