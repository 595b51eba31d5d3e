"""invoke tasks for chores around the suite: fetch, lock and verify models, probe, compare, history, changes,
report,
resolve.

Each task is a thin wrapper over the ``specsuite`` command of the same name (the nox sessions call the same
commands): its options become the command's arguments, so every option is checked in one place, and its
docstring and option help are the command parser's own. A failure is the command's own one line (printed
by the command, never again by invoke: the ``Exit`` carries the exit code only), Ctrl-C an ``interrupted``
line and 130. ``invoke --help TASK`` lists a task's positionals as positionals (``A``, ``B``), first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import invoke.collection
from invoke import Argument, Collection, Exit, Task
from invoke.parser import ParserContext
from invoke.parser.context import flag_key, to_flag

from specsuite.cli import command_parser, main, task_help


def command(klass: type[Task] = Task, **options: Any) -> Callable[[Callable[..., None]], Task]:
    """A task running the command named like the function, described by that command's parser."""

    def wrap(body: Callable[..., None]) -> Task:
        name = body.__name__.replace("_", "-")
        body.__doc__ = command_parser(name).description
        return klass(body, help=task_help(name), **options)

    return wrap


def _run(command: str, *positional: str | None, **options: Any) -> None:
    argv = [command, *(p for p in positional if p)]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value not in (None, False, ""):
            argv.append(f"{flag}={value}")  # one token: a value may itself start with "--" (extra args)
    code = main(argv)
    if code:
        raise Exit(code=code)  # no message: the command has said what went wrong, once


class _Context(ParserContext):
    """A task's arguments as ``invoke --help TASK`` lists them: its positionals first, by their names as
    the command's usage writes them (``A``, ``B``), then its options. invoke's own listing shows a positional
    as an option (``-a STRING``), which reads as a flag to give, and following it fails where the task
    takes the positional in another way (compare's ``B --against auto``)."""

    def help_tuples(self) -> list[tuple[str, str | None]]:
        shown: list[tuple[str, str | None]] = [
            (str(a.name).upper(), f"(positional) {a.help or ''}") for a in self.positional_args
        ]
        options = sorted((a for a in self.flags.values() if not a.positional), key=flag_key)
        return shown + [self.help_for(to_flag(str(a.name))) for a in dict.fromkeys(options)]


# invoke builds every task's parser context with the ParserContext its collection module names, and offers
# no other hook for a task's help listing (its loader copies `ns` into a plain Collection, so a Collection
# subclass is lost): the one name is replaced, for the tasks of this file. tests/test_cli.py runs
# `invoke --help compare` and checks the listing, so an invoke that builds its contexts otherwise fails there.
invoke.collection.ParserContext = _Context  # type: ignore[misc]


class _RequiredUnless(Argument):
    """A positional required only while another argument has no value (invoke has no optional positional):
    compare's A and B. With ``--against auto`` the one run given lands in A (invoke fills positionals in
    order), and the command's parser, whose A is the optional one, reads it as B."""

    def __init__(self, other: Argument, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.other = other

    @property
    def value(self) -> Any:
        mine = super().value
        return "" if mine is None and self.other.value is not None else mine

    @value.setter
    def value(self, arg: str) -> None:
        self.set_value(arg, cast=True)


class _CompareTask(Task):
    def get_arguments(self, *args: Any, **kwargs: Any) -> list[Argument]:
        found = super().get_arguments(*args, **kwargs)
        against = next(a for a in found if a.name == "against")
        return [
            _RequiredUnless(against, names=a.names, kind=a.kind, help=a.help, positional=True)
            if a.name in ("a", "b")
            else a
            for a in found
        ]


@command(auto_shortflags=False)  # -h must stay help, not --hf-cache
def fetch_models(c, tier=None, methods=None, models=None, lock=None, model_dir=None, jobs=None,
                 connections=None, offline=False, frozen=False, hf_cache=False):  # fmt: skip
    _run("fetch-models", tier=tier, methods=methods, models=models, lock=lock, model_dir=model_dir, jobs=jobs,
         connections=connections, offline=offline, frozen=frozen, hf_cache=hf_cache)  # fmt: skip


@command()
def lock_models(c, lock=None, check=False):
    _run("lock-models", lock=lock, check=check)


@command()
def verify_models(c, lock=None, model_dir=None, full=False):
    _run("verify-models", lock=lock, model_dir=model_dir, full=full)


@command()
def probe(c, binary=None, all_cases=False):
    _run("probe", binary, all_cases=all_cases)


@command(positional=["a", "b"], klass=_CompareTask)
def compare(
    c, a, b, against=None, rtol=None, all=False, markdown=False, no_plot=False
):  # A B, or B --against auto
    _run("compare", a, b, against=against, rtol=rtol, all=all, markdown=markdown, no_plot=no_plot)


@command()
def make_synthetic_models(c, out=None, print_lock=False):
    _run("make-synthetic-models", out=out, print_lock=print_lock)


@command()
def history(c, case=None, device=None, last=None, plot=None, json=False, db=None):
    _run("history", case=case, device=device, last=last, plot=plot, json=json, db=db)


@command()
def changes(c, case=None, metric=None, device=None, json=False, db=None, mirror=None):
    _run("changes", case=case, metric=metric, device=device, json=json, db=db, mirror=mirror)


@command()
def report(c, out=None, device=None, last=None, results=None, db=None):
    _run("report", out=out, device=device, last=last, results=results, db=db)


@command()
def resolve(
    c,
    model=None,  # an option, as the command's --model (required there): not an invoke positional
    mode=None,
    device=None,
    binary=None,
    mtp_drafter=None,
    model_id=None,
    spec_draft_n_max=None,
    extra_args=None,
):
    _run(
        "resolve",
        model=model,
        mode=mode,
        device=device,
        binary=binary,
        mtp_drafter=mtp_drafter,
        model_id=model_id,
        spec_draft_n_max=spec_draft_n_max,
        extra_args=extra_args,
    )


ns = Collection(
    fetch_models,
    lock_models,
    verify_models,
    probe,
    compare,
    make_synthetic_models,
    history,
    changes,
    report,
    resolve,
)
