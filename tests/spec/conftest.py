"""The suite's session: case selection from SPEC_METHODS, the binary's probe, models, baselines, results.

``SPEC_METHODS`` is a tier (smoke, synthetic, compact, nightly, all) or a comma list of case names; unset
selects nothing, an unknown name is a usage error listing the valid ones. ``python -m specsuite run-tier``
sets it (and ``SPEC_RESULTS_DIR``); a direct ``pytest tests/spec`` run works the same way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from specsuite import paths
from specsuite.cases import Case, load_cases, select_cases
from specsuite.errors import UserError
from specsuite.measure import decode_tps, run_prompts
from specsuite.probe import Capabilities, probe
from specsuite.results import RunResults, default_results_dir, sha256_file, write_summary
from specsuite.server import LlamaServer, ServerFailed, build_command, free_port, start_timeout_s

GPU_TIMEOUT_S = 3600  # a 41 GiB target loads for minutes; the project default (900 s) is for CPU tiers
_RESULT_LINES: list[str] = []


def _lock_names() -> set[str] | None:
    if not paths.MODELS_LOCK.is_file():
        return None
    from specsuite.lockfile import load_lock

    return load_lock().names()


def pytest_configure(config: pytest.Config) -> None:
    selector = os.environ.get("SPEC_METHODS", "").strip()
    try:
        config.stash[_CASES] = select_cases(load_cases(lock_names=_lock_names()), selector)
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_SELECTOR] = selector


_CASES = pytest.StashKey[list[Case]]()
_SELECTOR = pytest.StashKey[str]()


def _marks(case: Case) -> list[Any]:
    marks = [pytest.mark.suite, pytest.mark.integration]
    if case.gpu:
        marks += [pytest.mark.heavy, pytest.mark.slow, pytest.mark.timeout(GPU_TIMEOUT_S)]
    return marks


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = metafunc.config.stash[_CASES]
        metafunc.parametrize("case", [pytest.param(c, id=c.name, marks=_marks(c)) for c in cases])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """SPEC_METHODS unset (or empty) selects nothing: deselect rather than show an empty-parameter skip."""
    if not config.stash[_CASES]:
        # Only this folder's suite items: the hook sees every test of the session, and the project's own
        # parametrized tests must never be dropped with them.
        here = Path(__file__).parent
        dropped = [i for i in items if i.path.is_relative_to(here) and "case" in i.fixturenames]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [i for i in items if i not in dropped]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _RESULT_LINES:
        terminalreporter.section("speculative decoding results")
        for line in _RESULT_LINES:
            terminalreporter.write_line(line)
    if _SUITE_DIR:
        terminalreporter.write_line(f"results: {_SUITE_DIR[0]}")


_SUITE_DIR: list[Path] = []


def _tier_of(selector: str, cases: list[Case]) -> str:
    tiers = sorted({c.tier for c in cases})
    return selector if selector in ("smoke", "synthetic", "compact", "nightly", "all") else ",".join(tiers)


class Suite:
    """What every case of the session shares."""

    def __init__(self, caps: Capabilities, results: RunResults) -> None:
        self.caps = caps
        self.results = results
        self._baselines: dict[str, dict[str, Any] | ServerFailed] = {}
        self.result_lines = _RESULT_LINES

    def model_paths(self, case: Case) -> dict[str, Path]:
        """Verified local paths of the case's models (the fetcher checks size and sha256, offline)."""
        from specsuite.fetch import fetch_models

        try:
            found = fetch_models(models=case.models, offline=True)
        except UserError as exc:
            raise UserError(
                f"{exc}\nfetch and verify them with `invoke fetch-models --tier {case.tier}`"
            ) from None
        self._record_models(found)
        return found

    def _record_models(self, found: dict[str, Path]) -> None:
        entries = {}
        if paths.MODELS_LOCK.is_file():
            from specsuite.lockfile import load_lock

            entries = load_lock().entries
        for name, path in found.items():
            if name not in self.results.doc["models"]:
                # sha256 as locked: the fetcher has just verified these bytes against it.
                sha = entries[name].sha256 if name in entries else sha256_file(path)
                self.results.add_model(name, sha, path.stat().st_size)

    def baseline(self, case: Case, target: Path) -> dict[str, Any]:
        """Reference tokens and plain decode speed: speculation off, once per target (and prompt set)."""
        key = (
            case.target
            if (case.prompts, case.n_predict) == ("seed", 128)
            else (f"{case.target}|{case.prompts}|{case.n_predict}")
        )
        if key not in self._baselines:
            self._baselines[key] = self._run_baseline(key, case, target)
        got = self._baselines[key]
        if isinstance(got, ServerFailed):
            raise got
        return got

    def _run_baseline(self, key: str, case: Case, target: Path) -> dict[str, Any] | ServerFailed:
        safe = key.replace("|", "-").replace("/", "_")
        log = self.results.logs / f"baseline-{safe}.log"
        cmd = build_command(self.caps, target, free_port())
        try:
            with LlamaServer(cmd, log, start_timeout=start_timeout_s([target])) as srv:
                comps = run_prompts(srv.post, case.prompts, case.n_predict)
        except ServerFailed as exc:
            return exc
        tps = decode_tps(comps)
        self.results.add_baseline(
            key,
            {
                "command": cmd,
                "decode_tps": None if tps is None else round(tps, 2),
                "log": self.results.rel(log),
            },
        )
        return {"completions": comps, "decode_tps": tps}


def _binary_info(caps: Capabilities) -> dict[str, Any]:
    try:
        from specsuite import buildinfo

        info = buildinfo.load() or {}
    except ImportError:  # no build module (binary from elsewhere): the probe's data stands alone
        info = {}
    sha = sha256_file(Path(caps.binary))
    if info.get("binary_sha256") != sha:  # build-info.json describes another binary (LLAMA_SERVER_BIN_PATH)
        info = {}
    return {
        "path": caps.binary,
        "sha256": sha,
        "commit": info.get("commit") or caps.commit,
        "backend": info.get("backend") or caps.backend,
        "version_text": caps.version_text,
    }


@pytest.fixture(scope="session")
def suite(request: pytest.FixtureRequest) -> Suite:
    selector = request.config.stash[_SELECTOR]
    try:
        caps = probe(paths.server_binary())
    except UserError as exc:
        pytest.fail(str(exc), pytrace=False)
    out = Path(os.environ.get("SPEC_RESULTS_DIR") or default_results_dir(selector))
    results = RunResults(out, tier=_tier_of(selector, request.config.stash[_CASES]), selector=selector)
    results.set_binary(_binary_info(caps))
    _SUITE_DIR.append(out)
    yield Suite(caps, results)
    results.save()
    write_summary(out)
