"""The one place that sets the offline environment defaults of arborag.

Every process of ours runs offline and without telemetry: no Hugging Face hub downloads, no
Prefect analytics, a slow-start allowance for Prefect's ephemeral server and a quiet Prefect
log. :func:`offline_env` sets each variable only where the environment does not set it already
(``scripts/env.sh`` exports the same values for shells). Prefect reads its settings when it is
imported, so call this *before* ``import prefect``.

It also gives numba a user-level cache folder (``NUMBA_CACHE_DIR``, default
:func:`numba_cache_dir`: ``$XDG_CACHE_HOME/arborag/numba`` or ``~/.cache/arborag/numba``), where
UMAP's compiled code is kept between processes (:mod:`arborag.tasks.cluster.umap_import`): a machine
compiles it once instead of every build paying 15-50 s. ``ARBORAG_NUMBA_CACHE=0`` (or an
unwritable folder) leaves numba's own default.
"""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["NUMERIC_PACKAGES", "OFFLINE_ENV", "cpu_info", "native_bf16", "numba_cache_dir", "numeric_environment", "offline_env",
           "prefect_api_url", "resolve_dtype", "user_cache_path"]

#: The defaults, by variable name.
OFFLINE_ENV: Mapping[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "PREFECT_LOGGING_LEVEL": "WARNING",
}


def offline_env() -> None:
    """Set every :data:`OFFLINE_ENV` variable that the environment does not set already."""
    for name, value in OFFLINE_ENV.items():
        os.environ.setdefault(name, value)
    if "NUMBA_CACHE_DIR" not in os.environ:
        folder = numba_cache_dir()
        if folder is not None:
            os.environ["NUMBA_CACHE_DIR"] = str(folder)


#: The installed packages a tree's numbers come from: the embedder's (vectors) and the clustering's.
NUMERIC_PACKAGES = ("torch", "transformers", "sentence-transformers", "tokenizers", "numpy", "scipy", "scikit-learn",
                    "umap-learn", "pynndescent", "numba", "llvmlite")
#: CPU instruction sets that choose the float kernels (bf16 and fused multiply-add paths of torch,
#: numba's fastmath code): the ones of them a CPU has are recorded.
_CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16", "neon", "asimd", "sve", "bf16")


@functools.lru_cache(maxsize=1)
def cpu_info() -> tuple[str, frozenset[str]]:
    """(model name, instruction-set flags) of this machine's first core, from ``/proc/cpuinfo``
    (x86: "model name" and "flags"; arm64: "Features"); ("", {}) where there is none to read."""
    model, flags = "", frozenset[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and not model:
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = frozenset(value.split())
    except OSError:
        pass
    return model, flags


def native_bf16(machine: str | None = None, flags: frozenset[str] | set[str] | None = None) -> bool | None:
    """Whether the CPU computes bfloat16 dot products in hardware — x86: ``avx512_bf16`` or
    ``amx_bf16``; arm64: ``bf16`` — or None when its flags cannot be read (not Linux). Without them
    bf16 is converted in software: the packaged model encoded **2.0x (no avx512_bf16) to 4.0x (no
    AVX-512) slower in bf16 than in fp32**, against 1.7x faster with them (this machine with oneDNN
    capped, benchmarks/results/embed_isa.md), so ``embed.dtype: auto`` picks fp32 there.
    ``machine``/``flags`` default to this machine's."""
    machine = (machine if machine is not None else platform.machine()).lower()
    flags = flags if flags is not None else cpu_info()[1]
    if not flags:
        return None
    if machine in ("x86_64", "amd64", "i686", "x86"):
        return bool({"avx512_bf16", "amx_bf16"} & set(flags))
    if machine in ("aarch64", "arm64"):
        return "bf16" in flags
    return False


def resolve_dtype(dtype: str) -> str:
    """``embed.dtype`` as the embedder runs it: ``auto`` is bfloat16 where the CPU has bf16 dot
    products in hardware (:func:`arborag.env.native_bf16`), else float32 (also where the CPU's
    flags cannot be read: fp32 is never far from the faster choice, bf16 without hardware support is)."""
    if dtype in ("float32", "bfloat16"):
        return dtype
    if dtype != "auto":
        raise ValueError(f"embed.dtype must be auto, float32 or bfloat16, not {dtype!r}")
    return "bfloat16" if native_bf16() else "float32"


@functools.lru_cache(maxsize=1)
def numeric_environment() -> dict[str, Any]:
    """What a tree's numbers depend on besides its inputs and config: Python, the versions of
    :data:`NUMERIC_PACKAGES` (None: not installed) and the CPU (model name, the flags of
    :data:`_CPU_FLAGS` it has). A snapshot's ``info.json`` records it (``environment``): the same
    code, inputs and config gave other node ids on an AMD EPYC VM with a fresh install than on the
    Intel Xeon VM before it (docs/BENCHMARKS.md, "The cold path"), and the CPU alone is enough for
    that (benchmarks/results/embed_isa.md): this is what tells two such trees apart. Read from the
    dist-info folders on ``sys.path`` and ``/proc/cpuinfo`` (~8 ms; nothing imported)."""
    packages = _installed_versions(NUMERIC_PACKAGES)
    model, flags = cpu_info()
    cpu = model or platform.processor() or platform.machine()
    return {"python": platform.python_version(), "machine": platform.machine(), "cpu": cpu,
            "cpu_flags": [f for f in _CPU_FLAGS if f in flags], "packages": packages}


def _installed_versions(names: tuple[str, ...]) -> dict[str, str | None]:
    """Versions of the distributions ``names`` (None: not installed), read from the names of the
    ``*.dist-info`` folders on ``sys.path`` — one directory listing per path entry (~1 ms; asking
    ``importlib.metadata.version`` name by name scans every entry each time: 35-50 ms for these 11),
    with ``importlib.metadata`` for a name no folder name gave."""
    import re
    import sys

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "_", name).lower()

    want = {norm(n): n for n in names}
    found: dict[str, str | None] = {}
    for entry in sys.path:
        try:
            listing = os.listdir(entry or ".")
        except OSError:
            continue
        for item in listing:
            if item.endswith(".dist-info") and "-" in item:
                dist, version = item[: -len(".dist-info")].split("-", 1)
                name = want.get(norm(dist))
                if name is not None and name not in found:
                    found[name] = version
    missing = [n for n in names if n not in found]
    if missing:
        from importlib.metadata import PackageNotFoundError, version as dist_version

        for name in missing:
            try:
                found[name] = dist_version(name)
            except PackageNotFoundError:
                found[name] = None
    return {n: found[n] for n in names}


def user_cache_path(name: str, switch: str) -> Path | None:
    """``$XDG_CACHE_HOME/arborag/<name>`` (or ``~/.cache/arborag/<name>``), not created; None when
    the environment variable ``switch`` turns that cache off (0, false, no, off)."""
    if os.environ.get(switch, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "arborag" / name


def numba_cache_dir() -> Path | None:
    """arborag's user-level numba cache folder (created), or None when it is switched off
    (``ARBORAG_NUMBA_CACHE=0``) or cannot be created."""
    folder = user_cache_path("numba", "ARBORAG_NUMBA_CACHE")
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def prefect_api_url() -> str | None:
    """The Prefect server this process is configured to report to, read without importing Prefect
    (importing it costs ~1 s): ``PREFECT_API_URL`` from the environment, else ``[api] url`` of a
    ``prefect.toml`` in the working folder, else ``PREFECT_API_URL`` of the active profile in
    Prefect's ``profiles.toml`` (``PREFECT_PROFILES_PATH``, ``$PREFECT_HOME/profiles.toml`` or
    ``~/.prefect/profiles.toml``; the profile named by ``PREFECT_PROFILE`` or the file's ``active``).
    None when none of these names a server (then a Prefect run would start a temporary local API)."""
    url = os.environ.get("PREFECT_API_URL", "").strip()
    if url:
        return url
    toml = _read_toml(Path("prefect.toml"))
    api = toml.get("api") if isinstance(toml, dict) else None
    if isinstance(api, dict) and str(api.get("url") or "").strip():
        return str(api["url"]).strip()
    if os.environ.get("PREFECT_PROFILES_PATH"):
        path = Path(os.environ["PREFECT_PROFILES_PATH"]).expanduser()
    else:
        home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
        path = home / "profiles.toml"
    profiles = _read_toml(path)
    name = os.environ.get("PREFECT_PROFILE") or profiles.get("active")
    listed = profiles.get("profiles")
    table = listed.get(name) if isinstance(listed, dict) else None
    if isinstance(table, dict) and str(table.get("PREFECT_API_URL") or "").strip():
        return str(table["PREFECT_API_URL"]).strip()
    return None


def _read_toml(path: Path) -> dict[str, object]:
    try:
        import tomllib

        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
