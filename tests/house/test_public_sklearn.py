"""The package uses scikit-learn through its public API only.

A private name (``sklearn.cluster._kmeans._kmeans_single_lloyd``, ``GaussianMixture._m_step``)
may move or change in any scikit-learn release. This test reads every ``.py`` file of the
package folders (``arborag/`` and ``setup.py``'s ``FOLDERS``) and fails on: an import of a private scikit-learn
module or name, an attribute path through one (``sklearn.mixture._base``), and a class derived
from a scikit-learn class that defines a private method (an override of its internals).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _package_files() -> list[Path]:
    for node in ast.parse((ROOT / "setup.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "FOLDERS" for t in node.targets):
            folders = ast.literal_eval(node.value)
            break
    else:
        raise AssertionError("setup.py assigns no FOLDERS")
    names = ["arborag", *folders]  # the folders (the keys) mapped into the arborag namespace
    return sorted(p for name in names for p in (ROOT / str(name)).rglob("*.py"))


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` of an attribute chain on a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def private_sklearn_uses(source: str) -> list[str]:
    """What in ``source`` reaches a private scikit-learn name, one line each (empty: nothing)."""
    tree = ast.parse(source)
    found: list[str] = []
    sklearn_names: set[str] = set()  # local names bound to scikit-learn modules or classes
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sklearn":
                    if any(_private(p) for p in alias.name.split(".")):
                        found.append(f"line {node.lineno}: import {alias.name}")
                    sklearn_names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sklearn":
            for alias in node.names:
                if any(_private(p) for p in node.module.split(".")) or _private(alias.name):
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
                sklearn_names.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            path = _dotted(node)
            if path and path.split(".")[0] in sklearn_names and any(_private(p) for p in path.split(".")[1:]):
                found.append(f"line {node.lineno}: {path}")
        elif isinstance(node, ast.ClassDef):
            bases = [_dotted(b) or "" for b in node.bases]
            if any(b.split(".")[0] in sklearn_names for b in bases if b):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(item.name):
                        found.append(f"line {item.lineno}: {node.name}.{item.name} overrides a private scikit-learn method")
    return sorted(set(found))


def test_the_check_finds_each_kind_of_private_use() -> None:
    assert private_sklearn_uses("from sklearn.cluster._kmeans import _kmeans_single_lloyd\n")
    assert private_sklearn_uses("from sklearn.utils import _safe_indexing\n")
    assert private_sklearn_uses("import sklearn.mixture._base\n")
    assert private_sklearn_uses("import sklearn\nf = sklearn.mixture._gaussian_mixture._estimate_log_gaussian_prob\n")
    assert private_sklearn_uses(
        "from sklearn.mixture import GaussianMixture\nclass G(GaussianMixture):\n    def _m_step(self, X, r):\n        pass\n"
    )
    public = (
        "from sklearn.mixture import GaussianMixture\nimport sklearn.metrics\n"
        "class G(GaussianMixture):\n    def __init__(self):\n        super().__init__()\n"
        "g = GaussianMixture(2)._private_attr_of_ours = 1\nd = sklearn.metrics.pairwise_distances\n"
    )
    assert private_sklearn_uses(public) == []


def test_the_package_uses_only_public_scikit_learn() -> None:
    files = _package_files()
    assert any(p.name == "mixture.py" for p in files)  # the folders were found
    bad = {str(p.relative_to(ROOT)): uses for p in files if (uses := private_sklearn_uses(p.read_text(encoding="utf-8")))}
    assert bad == {}, f"private scikit-learn names (use the public API instead): {bad}"
