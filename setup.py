"""Package layout: one ``arborag`` import namespace over the user's top-level folders.

``flows/``, ``tasks/``, ``storage/`` and ``query/`` install as ``arborag.flows``,
``arborag.tasks``, ``arborag.storage`` and ``arborag.query``; subpackages are found
automatically, so a wheel holds no top-level package but ``arborag``. Everything else about the
project is in ``pyproject.toml``.
"""

from setuptools import find_packages, setup

FOLDERS = {"flows": "arborag.flows", "tasks": "arborag.tasks", "storage": "arborag.storage", "query": "arborag.query"}

packages = ["arborag", *(f"arborag.{p}" for p in find_packages("arborag"))]
for folder, pkg in FOLDERS.items():
    packages += [pkg, *(f"{pkg}.{p}" for p in find_packages(folder))]

setup(packages=packages, package_dir={"arborag": "arborag", **{pkg: folder for folder, pkg in FOLDERS.items()}})
