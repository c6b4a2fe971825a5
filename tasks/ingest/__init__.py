"""The ``documents`` stage, split along its seams; the stage API is :mod:`arborag.tasks.stages.documents`."""
