"""The harness of a run: the pytest plugin that maps cases onto tests (and xdist workers onto places),
a run's session from probe to verdict, the history gate, ``run-tier``, shards and plans. A case itself is
measured and judged by the engine, ``specsuite.measure``, which knows no pytest."""
