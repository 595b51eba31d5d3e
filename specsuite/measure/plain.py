"""The speculation-off (plain decoding) server of a case: its command, and which cases can share one.

Called the case's baseline in results.json (``baseline_command``, ``baseline_decode_tps``: the names since
schema 1); in the code it is the plain server, so that "baseline" means one thing there: the history's
baseline run (``history.baseline``).

Like with like: the baseline server of a case runs the case's own command without its speculative flags
(``without_speculation``, below), so threads, batch sizes, context, offload, flash attention, KV cache
types and every ``server_args`` entry that is not speculative are the same on both sides. Two cases whose
non-speculative flags differ get two baselines; cases whose commands differ only in speculation share one
(the session keeps it while consecutive cases use it). The key is the whole non-speculative command (port
left out), the GPUs the servers see and the CPUs they are pinned to: a flag the suite adds later
(``--parallel N``) splits baselines by itself, with nothing to change here.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specsuite.server.probe import Capabilities
from specsuite.server.process import Command

_FLAG = re.compile(r"--?[A-Za-z]")  # a flag; a value may start with "-" only as a number ("-1")
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


def split_speculative(caps: Capabilities, argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the argv without its speculative flags, those flags with their values), order kept in both.

    A speculative flag takes the next token as its value unless its --help entry shows no value (a
    switch), or, for a flag the probe did not list, unless that token is a flag itself (llama-server takes
    no positional arguments, so a token after a flag that is not a flag is its value)."""
    rest: list[str] = [argv[0]] if argv else []
    spec: list[str] = []
    i = 1
    while i < len(argv):
        arg = argv[i]
        if not (_FLAG.match(arg) and caps.is_speculative(arg)):
            rest.append(arg)
            i += 1
            continue
        takes = "=" not in arg and arg not in caps.spec_switches
        if arg not in caps.speculative:  # not in the help's entries: by what follows it
            takes = takes and i + 1 < len(argv) and not _FLAG.match(argv[i + 1])
        width = 2 if takes and i + 1 < len(argv) else 1
        spec += argv[i : i + width]
        i += width
    return rest, spec


def without_speculation(caps: Capabilities, argv: Sequence[str]) -> list[str]:
    """A case's command as its speculation-off baseline runs it: every speculative flag dropped, then the
    build's own word for no speculation (``off_flags``) last, where llama.cpp takes the last of a repeated
    flag: a default that speculates is turned off as a user would turn it off."""
    return split_speculative(caps, argv)[0] + off_flags(caps)


def off_flags(caps: Capabilities) -> list[str]:
    """How this build is told not to speculate: ``--no-spec-type`` where its help lists one (upstream's
    #28391 makes ngram-mod the default and ``--spec-type`` additive, so ``none`` would add nothing to it),
    else ``--spec-type none``; a build with neither keeps its argv (nothing to say it with). Whether it
    listened is the plain server's counters' to say (measure.engaged), not these flags'."""
    if "--no-spec-type" in caps.options:
        return ["--no-spec-type"]
    spelling = caps.flag("spec_type")
    return [spelling, "none"] if spelling and "none" in caps.spec_types else []
