"""The speculative-decoding suite: a case's server command, its run and judgement, one run's session and
gate, ``run-tier``, and the pytest plugin that maps cases onto tests."""
