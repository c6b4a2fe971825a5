"""What a build starts from: its leaves, its content-addressed key and what it would cost."""
