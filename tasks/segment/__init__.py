"""Segmentation: the chunking algorithms, the sections of a document, and what a segment run may reuse."""
