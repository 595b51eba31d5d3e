"""A run's results folder: the results.json document and its records, the verdict, summary.md, JUnit
properties, bench.json and per-position plots."""
