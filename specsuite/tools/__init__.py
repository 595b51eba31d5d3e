"""Commands over finished runs: calibrate floors, compare runs."""
