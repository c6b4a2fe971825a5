"""Stage runners, one module per stage (named as the stage is), each beside its pure function."""
