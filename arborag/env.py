"""The one place that sets the offline environment defaults of arborag.

Every process of ours runs offline and without telemetry: no Hugging Face hub downloads, no
Prefect analytics, a slow-start allowance for Prefect's ephemeral server and a quiet Prefect
log. :func:`offline_env` sets each variable only where the environment does not set it already
(``scripts/env.sh`` exports the same values for shells). Prefect reads its settings when it is
imported, so call this *before* ``import prefect``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["OFFLINE_ENV", "offline_env"]

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
