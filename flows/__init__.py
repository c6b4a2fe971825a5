"""Prefect flows over the stage functions in ``tasks``."""
