"""Read-only query API over a published arborag snapshot (filled in by the tree issue)."""
