"""A port taken between the pick and the bind: llama-server says it could not bind (port_in_use) and
start_server tries another port.

Two runs side by side on one machine (two runners; this project's own tests under pytest-xdist) can pick
the same free port at once: each worker's range starts at the same port (server.workers). The real server
then fails to bind and the run picks again (test_process's real-build test shows what it prints). The fake
used to die with Python's traceback instead, which read as a crash (server_exited) and failed a case in
CI; it now fails as llama-server does. The race itself cannot be timed from a test, so the pick is handed a
port that something already listens on (conftest's ``taken``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakellama import fake_llama

from specsuite.server import process
from specsuite.server.process import LlamaServer, ServerFailed, start_server


def test_a_bind_that_fails_is_port_in_use(tmp_path: Path, taken: int) -> None:
    exe = fake_llama(tmp_path / "bin")
    srv = LlamaServer([str(exe), "--port", str(taken)], tmp_path / "s.log", start_timeout=60)
    with pytest.raises(ServerFailed) as exc:
        srv.start()
    assert exc.value.reason == "port_in_use" and "couldn't bind HTTP server socket" in str(exc.value)
    assert srv.proc is None


@pytest.mark.parametrize("lost", [1, process.PORT_ATTEMPTS])
def test_start_server_picks_another_port_after_a_lost_race(
    tmp_path: Path, taken: int, lost: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first ``lost`` picks are the taken port: after fewer than PORT_ATTEMPTS the server runs on
    another one; after PORT_ATTEMPTS the failure is port_in_use, not a crash."""
    picks = [taken] * lost
    real_pick = process.free_port
    monkeypatch.setattr(process, "free_port", lambda ports=None: picks.pop() if picks else real_pick(ports))
    exe = fake_llama(tmp_path / "bin")
    command = lambda port: [str(exe), "--port", str(port)]  # noqa: E731
    if lost == process.PORT_ATTEMPTS:
        with pytest.raises(ServerFailed) as exc:
            start_server(command, tmp_path / "s.log")
        assert exc.value.reason == "port_in_use"
        return
    srv = start_server(command, tmp_path / "s.log")
    try:
        assert srv.running and srv.port != taken
        assert srv.post("/completion", {"prompt": "a", "n_predict": 2})["timings"]["predicted_n"] == 2
    finally:
        srv.stop()
