"""What a build would cost: the dry run's per-level summarizer estimate (:func:`estimate_cost`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from arborag.config import ArboragConfig

__all__ = ["estimate_cost"]

# Average number of children a summary covers. RAPTOR's GMM clusters hold a handful of
# nodes; 5 matches the trees arborag builds. Used only for estimates.
_EST_CLUSTER_SIZE = 5.0
_EST_MEMBERSHIP = 1.1  # soft membership puts some nodes in more than one cluster


def estimate_cost(leaves: pa.Table, config: ArboragConfig) -> list[dict[str, Any]]:
    """Per level: nodes in, summaries out, summarizer input/output tokens, price (openai)."""
    cfg = config.cluster
    out_tokens = config.summarize.max_tokens
    n = leaves.num_rows
    tokens_per_node = float(np.mean(leaves.column("n_tokens").to_numpy())) if n else 0.0
    rows = []
    level = 0
    while n > cfg.dims + 1 and level < cfg.max_levels:
        n_sum = max(1, int(np.ceil(n * _EST_MEMBERSHIP / _EST_CLUSTER_SIZE)))
        t_in = int(n * _EST_MEMBERSHIP * tokens_per_node)
        t_out = n_sum * out_tokens
        price = 0.0
        if config.summarize.backend == "openai":
            price = t_in / 1000 * config.summarize.price_in_per_1k + t_out / 1000 * config.summarize.price_out_per_1k
        rows.append({"level": level + 1, "nodes_in": n, "summaries": n_sum, "tokens_in": t_in, "tokens_out": t_out, "price": round(price, 4)})
        if n_sum >= n:
            break
        n, tokens_per_node, level = n_sum, float(out_tokens), level + 1
    return rows
