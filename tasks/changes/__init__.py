"""Change detection of sources: which files need reading again and which documents changed."""
