"""The speculation-off (plain decoding) server of a case: its command, and which cases can share one.

Called the case's baseline in results.json (``baseline_command``, ``baseline_decode_tps``: the names since
schema 1); in the code it is the plain server, so that "baseline" means one thing there: the history's
baseline run (``history.baseline``).

Like with like: the baseline server of a case runs the case's own command without its speculative flags
(``command.without_speculation``), so threads, batch sizes, context, offload, flash attention, KV cache
types and every ``server_args`` entry that is not speculative are the same on both sides. Two cases whose
non-speculative flags differ get two baselines; cases whose commands differ only in speculation share one
(the session keeps it while consecutive cases use it). The key is the whole non-speculative command (port
left out), the GPUs the servers see and the CPUs they are pinned to: a flag the suite adds later
(``--parallel N``) splits baselines by itself, with nothing to change here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from specsuite.measure.command import without_speculation
from specsuite.server.probe import Capabilities
from specsuite.server.process import Command

_ANY_PORT = 0  # the port a key's command is built with: every server gets its own, the key none


@dataclass(frozen=True)
class PlainServer:
    """What the speculation-off server of a case is: its command and the key servers are shared by."""

    key: tuple[tuple[str, ...], int, tuple[int, ...]]  # the non-speculative argv (port 0), GPUs, pinned CPUs
    label: str  # results.json's baselines entry and the log's name: target, GPUs, digest of the key
    command: Command

    @property
    def argv(self) -> list[str]:
        return list(self.key[0])


def plain_of(
    caps: Capabilities, case_command: Command, target: Path, gpus: int = 1, cpus: frozenset[int] | None = None
) -> PlainServer:
    """The plain server of a case whose server runs ``case_command`` (on ``cpus``, where pinned)."""
    argv = tuple(without_speculation(caps, case_command(_ANY_PORT)))
    pinned = tuple(sorted(cpus or ()))
    digest = hashlib.sha256("\0".join([*argv, str(gpus), str(pinned)]).encode()).hexdigest()[:8]
    label = f"{target.name.replace('/', '_')}{f'-{gpus}gpus' if gpus > 1 else ''}-{digest}"

    def command(port: int) -> list[str]:
        return without_speculation(caps, case_command(port))

    return PlainServer((argv, gpus, pinned), label, command)
