"""Whether what a binary lacks is not there yet (an older build than the suite's methods) or gone.

The suite's cases are written against the pin (``llama.cpp.pin.toml``'s ``build``): a method, flag or
metric a build older than the pin lacks may simply not exist yet there (DFlash arrived after b9246,
DFlash2 after b10644, the ``spec_decode_*`` counters at b10289), which is no failure of today's suite but
``not_in_build``: its own status and line. What a build lacks that an older build on the same setup had
measured vanished: that stays a failure (strict) as it always was. A build newer than the pin, or one
nothing orders, is judged as before: a lost method is a regression.
"""

from __future__ import annotations

from dataclasses import dataclass

from specsuite.history import queries
from specsuite.llamacpp.source import load_pin
from specsuite.results.document import Run
from specsuite.results.record import NOT_IN_BUILD

__all__ = ["NOT_IN_BUILD", "Vintage"]


@dataclass(frozen=True)
class Vintage:
    """Where the run's binary stands against the pin and its history."""

    build: int | None  # the binary's upstream build number
    pin_build: int | None  # the pin's
    device_class: str
    backend: str
    history: bool  # the history may be asked (not --no-history)

    @classmethod
    def of(cls, run: Run, history: bool) -> Vintage:
        return cls(
            run.binary.build,
            load_pin().build,
            run.device_class or "unknown",
            run.binary.backend or "unknown",
            history,
        )

    @property
    def older(self) -> bool:
        """Whether the binary is an older build than the one the suite's cases are written against."""
        return self.build is not None and self.pin_build is not None and self.build < self.pin_build

    def judge(self, case: str, what: str) -> tuple[bool, str]:
        """(whether ``what``, a method or flag this binary lacks, is not in this build yet; what to say):
        yes when the build predates the pin and no lower build measured the case on this setup; no (the
        strict rule: a loss) when it is newer than the pin or unordered, or when a lower build measured the
        case (it vanished: that build named)."""
        if not self.older or self.build is None:
            return False, ""
        below = queries.measured_below
        found = below(case, self.device_class, self.backend, self.build) if self.history else None
        if found is not None:
            run_id, build = found
            return False, f"; b{build} measured it here (run {run_id}): it vanished"
        return True, f"; b{self.build} predates the pin (b{self.pin_build}): not in this build yet"
