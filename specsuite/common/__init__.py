"""Mechanisms every concern shares, and nothing above them: errors, paths, atomic writes, hashing,
stat-keyed caches, tables, the TOML envelope, environment numbers, child processes and signals, pip."""
