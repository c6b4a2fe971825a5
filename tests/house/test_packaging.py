"""The wheel installs one import namespace: ``arborag`` and nothing else at the top level."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_holds_only_the_arborag_package(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)],
        check=True, capture_output=True, text=True,
    )
    (wheel,) = tmp_path.glob("arborag-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"arborag"}
    # every source package folder made it in, under the namespace
    for folder, pkg in {"flows": "flows", "tasks": "tasks", "storage": "storage", "query": "query"}.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.relative_to(ROOT / folder).as_posix()
            assert f"arborag/{pkg}/{rel}" in names, rel
    assert "arborag/cli/__init__.py" in names
