"""The suite's memory: the SQLite history of runs, the relative gate's statistics, commit ancestry and
the history report."""
