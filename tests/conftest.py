"""What every test process needs before any test runs."""

from __future__ import annotations

import signal

# A shell that starts the tests in the background (nohup, `cmd &` in a script, some CI agents) starts them
# with SIGINT ignored, and every child inherits that: the tests that send SIGINT to a child (Ctrl-C under
# run-tier, bench, invoke, bisect) would wait for an exit that never comes. A handler, unlike SIG_IGN, is
# reset to the default by exec, so the children get Ctrl-C's usual meaning back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
