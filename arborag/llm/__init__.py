"""The LLM layer: a client for any OpenAI-compatible chat-completions endpoint.

:class:`LLMClient` wraps the official ``openai`` client with what a batch pipeline needs:

- **retries** with exponential backoff (and jitter) on timeouts, connection errors, 408/409/429
  and 5xx; a ``Retry-After`` / ``retry-after-ms`` header is honoured (capped);
- **bounded concurrency**: :meth:`LLMClient.complete_many` runs at most ``concurrency``
  requests at once (a thread pool) and returns one result per request, in order;
- a **content-addressed cache** of calls (:class:`LLMCache`), keyed by
  ``hash_json({model, messages, params})`` and kept as JSON Lines shards on disk (one shard per
  client, rewritten atomically), so a rebuild pays only for prompts it has not seen;
- **token accounting**: prompt/completion tokens from the reply's ``usage``, or counted with
  arborag's tokenizer when a server sends none; exposed as counters for the ``runs`` table.

Errors: a call that still fails after its retries raises :class:`~arborag.errors.LLMError`
(``reason`` says why, e.g. ``"http 500 (4 attempts)"``); an endpoint that cannot be reached at
all raises :class:`~arborag.errors.BackendUnavailable`. Authentication and not-found errors
(401/403/404) are not retried and stop a whole :meth:`~LLMClient.complete_many` batch: every
other request would fail the same way.

The API key is read from the environment variable named by ``api_key_env`` when the first
request is made. It is handed to the ``openai`` client and to nothing else: it is not an
attribute of this class, not written to the cache, and removed from every error message and
log line this module produces. Nothing happens at import time (``openai`` is imported lazily).

Modules: :mod:`.types` (Message, Completion, LLMStats), :mod:`.cache` (the call cache),
:mod:`.transport` (one endpoint: key, retries, reply parsing), :mod:`.client` (LLMClient).
"""

from arborag.llm.cache import LLMCache
from arborag.llm.client import LLMClient
from arborag.llm.types import PLACEHOLDER_API_KEY, Completion, LLMStats, Message

__all__ = ["Completion", "LLMCache", "LLMClient", "LLMStats", "Message", "PLACEHOLDER_API_KEY"]
