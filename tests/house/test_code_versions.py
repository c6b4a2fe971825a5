"""Every stage declares a ``code_version``, and its code does not change under the same version.

The build key and the stage keys hold the declared versions, not the source (flows/stage.py
``code_versions``): a change to what a stage produces must bump its version, or builds keep
reusing trees the old code made. ``code_versions.json`` records, per stage, its version and the
modules it runs; per module, a hash of its code without comments, docstrings and layout
(``normalized_code``). This test fails when that code changed under the same version.

When it fails: if the change alters what the stage produces, bump the stage's ``code_version`` in
``flows/pipelines.py``; either way record the current code with
``python tests/house/test_code_versions.py --record``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RECORD = Path(__file__).with_name("code_versions.json")


def _stages() -> list[Any]:
    from arborag.flows.eval_stages import EVAL_BUILD
    from arborag.flows.pipelines import PIPELINES

    seen: dict[str, Any] = {}
    for pipeline in PIPELINES.values():
        for stage in pipeline:
            seen.setdefault(stage.name, stage)
    seen[EVAL_BUILD.name] = EVAL_BUILD
    return list(seen.values())


def current() -> dict[str, Any]:
    """The record of the code as it is now."""
    from arborag.flows.fingerprints import module_closure, normalized_code

    stages = _stages()
    modules = normalized_code(stages)
    return {
        "stages": {s.name: {"code_version": s.code_version, "modules": sorted(module_closure(s.modules))} for s in stages},
        "modules": dict(sorted(modules.items())),
    }


def test_every_stage_declares_a_code_version() -> None:
    missing = [s.name for s in _stages() if not s.code_version]
    assert not missing, f"stages without code_version (declare one in flows/pipelines.py): {missing}"


def test_stage_code_does_not_change_under_the_same_version() -> None:
    assert RECORD.is_file(), f"{RECORD.name} is missing: run `python tests/house/test_code_versions.py --record`"
    recorded = json.loads(RECORD.read_text(encoding="utf-8"))
    now = current()
    problems = []
    for name, stage in now["stages"].items():
        before = recorded["stages"].get(name)
        if before is None:
            problems.append(f"{name}: a new stage, not recorded yet")
            continue
        changed = sorted(
            {m for m in stage["modules"] if recorded["modules"].get(m) != now["modules"][m]}
            | (set(before["modules"]) ^ set(stage["modules"]))
        )
        if before["code_version"] != stage["code_version"]:
            problems.append(f"{name}: code_version {before['code_version']!r} -> {stage['code_version']!r} is not recorded yet")
        elif changed:
            problems.append(f"{name}: code changed under code_version {stage['code_version']!r} in {', '.join(changed)}")
    assert not problems, (
        "stage code and declared code versions disagree:\n  " + "\n  ".join(problems)
        + "\nIf the change alters what a stage produces, bump its code_version in flows/pipelines.py; then record the code: "
        "python tests/house/test_code_versions.py --record"
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/house/test_code_versions.py --record")
    RECORD.write_text(json.dumps(current(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"recorded {RECORD}")
