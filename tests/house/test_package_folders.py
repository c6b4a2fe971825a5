"""The project's source folders are named in four places; they must name the same folders.

``setup.py`` maps the folders into the ``arborag`` namespace (``FOLDERS``), ``scripts/install.sh``
byte-compiles them, ``benchmarks/cold_path.py`` byte-compiles them as the install does
(``PROJECT_FOLDERS``) and ``flows/noop.py`` hashes their ``.py`` files into the no-op record
(``_CODE_PACKAGES``: a code change makes the next update look). A package folder added to one
and not the others would be silently left out of the bytecode, a benchmark or the no-op check.
Read as text (``setup.py`` runs ``setup()`` when imported).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _assigned(path: Path, name: str) -> object:
    """The literal value assigned to module-level ``name`` in ``path``."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.name} assigns no {name}")


def test_every_list_of_the_project_folders_is_the_same() -> None:
    folders = _assigned(ROOT / "setup.py", "FOLDERS")
    assert isinstance(folders, dict)
    want = {"arborag", *folders}
    assert {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()} == want, "a package folder setup.py does not map"
    (line,) = [ln for ln in (ROOT / "scripts" / "install.sh").read_text(encoding="utf-8").splitlines() if re.match(r"\s*python -m compileall", ln)]
    assert set(line.split(">")[0].split()[4:]) == want, line
    assert set(_assigned(ROOT / "benchmarks" / "cold_path.py", "PROJECT_FOLDERS")) == want  # type: ignore[arg-type]
    assert set(_assigned(ROOT / "flows" / "noop.py", "_CODE_PACKAGES")) == {"arborag", *folders.values()}  # type: ignore[arg-type]
