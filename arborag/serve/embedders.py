"""The resident query embedders of the server: loaded once, shared by snapshots and requests.

Concurrent requests share forward passes: the texts queued while one pass runs are embedded
together in the next one.
"""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from arborag.config import EmbedConfig

__all__ = ["ResidentEmbedders"]


class _Pending:
    __slots__ = ("texts", "result", "error", "done")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.result: np.ndarray | None = None
        self.error: BaseException | None = None
        self.done = False


class ResidentEmbedders:
    """One loaded query embedder per embedder configuration, loaded on first use, kept for good.

    One forward pass runs at a time (the cores are better used by one batched pass than by
    several competing ones; the model loads once even under concurrent first requests), and
    the requests that arrive while a pass runs are embedded together in the next pass
    (up to :attr:`max_batch` texts), so concurrent clients share forward passes.
    """

    max_batch = 64

    def __init__(self, factory: Callable[[EmbedConfig], Callable[[list[str]], np.ndarray]] | None = None) -> None:
        self._factory = factory or _default_embedder
        self._models: dict[str, Callable[[list[str]], np.ndarray]] = {}
        self._queues: dict[str, list[_Pending]] = {}
        self._lock = threading.Lock()  # held during a forward pass
        self._qlock = threading.Lock()  # guards the queues
        self.passes = 0

    @property
    def loaded(self) -> bool:
        return bool(self._models)

    def for_config(self, cfg: EmbedConfig) -> Callable[[list[str]], np.ndarray]:
        key = cfg.model_dump_json()

        def embed(texts: list[str]) -> np.ndarray:
            item = _Pending(list(texts))
            with self._qlock:
                self._queues.setdefault(key, []).append(item)
            with self._lock:
                while not item.done:  # a previous pass may already have embedded this item
                    self._run_pass(key, cfg)
            if item.error is not None:
                raise item.error
            assert item.result is not None
            return item.result

        return embed

    def _run_pass(self, key: str, cfg: EmbedConfig) -> None:
        with self._qlock:
            queue = self._queues[key]
            batch: list[_Pending] = []
            n = 0
            while queue and (not batch or n + len(queue[0].texts) <= self.max_batch):
                batch.append(queue.pop(0))
                n += len(batch[-1].texts)
        try:
            model = self._models.get(key)
            if model is None:
                model = self._models[key] = self._factory(cfg)
            vectors = np.asarray(model([t for item in batch for t in item.texts]), dtype=np.float32)
            self.passes += 1
            at = 0
            for item in batch:
                item.result = vectors[at:at + len(item.texts)]
                at += len(item.texts)
        except BaseException as exc:  # every waiter of this pass gets the error
            for item in batch:
                item.error = exc
        finally:
            for item in batch:
                item.done = True


def _default_embedder(cfg: EmbedConfig) -> Callable[[list[str]], np.ndarray]:
    from arborag.embed.model import Embedder

    model = Embedder(cfg)
    return model.embed
