"""Stage functions: pure, typed, testable without Prefect. One module per table/stage."""
