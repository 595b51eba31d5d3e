"""The bridge from plain data (TOML unwrapped, or JSON) to a declared msgspec type, with one-line errors.

msgspec checks the types, constraints and unknown keys and says where as a path (``$.case[3].n_max``); this
module turns that into one ``UserError`` line naming the file, the entry and the field, in words a person
editing the file understands: ``cases.toml: [[case]] 'mtp': n_max must be an integer >= 1, got 0``.
msgspec's path gives a dict key only as ``[...]`` and no value, so the entry, the key and the value are
looked up here by walking the data beside the declared type (no library does that walk).

A field's ``Meta(description=...)`` is what the message says the value must be; a ``__post_init__`` rule's
``ValueError`` text is used as written, after the file and entry.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import msgspec

from specsuite.common.errors import UserError

T = TypeVar("T")
Segment = str | int  # a field or dict key, or a list index
# Names the entry a path points into: (its words, how many leading path segments they stand for).
EntryNamer = Callable[[Sequence[Segment], Any], tuple[str, int]]

_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_SEGMENT = re.compile(r"\.(\w+)|\[(\d+)\]|\[(\.\.\.)\]")
_MISSING = object()
_REPR_MAX = 80


@dataclass(frozen=True)
class _OneOf:
    """What a tag field may be: the tags of the union's members."""

    values: tuple[Any, ...]


def toml_entry(path: Sequence[Segment], data: Any) -> tuple[str, int]:
    """``[[case]] 'mtp'``: an array-of-tables entry by its ``name``, or by its position where it has none."""
    if len(path) < 2 or not isinstance(path[0], str) or not isinstance(path[1], int):
        return "", 0
    item = _child(_child(data, path[0]), path[1])
    name = item.get("name") if isinstance(item, dict) else None
    return entry_name(path[0], path[1], name), 2


def entry_name(table: str, index: int, name: object) -> str:
    """The words for entry ``index`` (from 0) of ``[[table]]``: by its name if it has a usable one."""
    return f"[[{table}]] {name!r}" if isinstance(name, str) and name else f"[[{table}]] #{index + 1}"


def convert(data: Any, type_: type[T], label: str, *, entry: EntryNamer = toml_entry) -> T:
    """``data`` as ``type_``; else one ``UserError`` line: ``label: entry: field ...`` (see the module)."""
    try:
        return msgspec.convert(data, type_)
    except msgspec.ValidationError as exc:
        raise UserError(explain(str(exc), data, type_, label, entry)) from None


def explain(error: str, data: Any, type_: Any, label: str, entry: EntryNamer = toml_entry) -> str:
    """The one line for msgspec's ``error`` about ``data`` converted to ``type_``."""
    m = _AT.match(error)
    assert m is not None  # the pattern matches any text
    msg = m.group("msg").replace("\n", " ")
    path, value, declared = _walk(_segments(m.group("path") or ""), data, type_)
    name, used = entry(path, data)
    field = _dotted(path[used:])
    text = _say(msg, field, value, declared)
    return ": ".join(p for p in (label, name, text) if p)


def _segments(path: str) -> list[Segment]:
    return [
        int(idx) if idx else (key or "...") for key, idx, _ in (m.groups() for m in _SEGMENT.finditer(path))
    ]


def _dotted(path: Sequence[Segment]) -> str:
    out = ""
    for seg in path:
        if isinstance(seg, int):
            out += f"[{seg}]"
        else:
            out += f".{seg}" if seg.isidentifier() else f"[{seg!r}]"
    return out.lstrip(".")


def _child(data: Any, seg: Segment) -> Any:
    if isinstance(seg, int):
        return data[seg] if isinstance(data, list) and -len(data) <= seg < len(data) else _MISSING
    return data.get(seg, _MISSING) if isinstance(data, dict) else _MISSING


# ---------------------------------------------------------------- walking the declared type beside the data


def _walk(path: list[Segment], data: Any, type_: Any) -> tuple[list[Segment], Any, Any]:
    """The path with dict keys filled in, the value it points at, and the declared type there."""
    out: list[Segment] = []
    for seg in path:
        type_ = _concrete(type_, data)
        if seg == "...":  # a dict value: the first key whose value does not convert is the one
            seg = _failing_key(data, _dict_value_type(type_))
        type_ = _member_type(type_, seg, data)
        data = _child(data, seg)
        out.append(seg)
    return out, data, type_


def _concrete(type_: Any, data: Any) -> Any:
    """Past ``Annotated`` and ``X | None``, and to the union member that matches the data's tag."""
    while get_origin(type_) is Annotated:
        type_ = get_args(type_)[0]
    if get_origin(type_) in (Union, types.UnionType):
        members = [t for t in get_args(type_) if t is not type(None)]
        tagged = [t for t in members if _tag(t)[0]]
        if tagged and isinstance(data, dict):
            field = _tag(tagged[0])[0]
            return next((t for t in tagged if _tag(t)[1] == data.get(field)), type_)
        if len(members) == 1:
            return _concrete(members[0], data)
    return type_


def _tag(type_: Any) -> tuple[str | None, Any]:
    config = getattr(type_, "__struct_config__", None)
    return (config.tag_field, config.tag) if config else (None, None)


def _member_type(type_: Any, seg: Segment, data: Any) -> Any:
    if isinstance(seg, int):
        args = get_args(type_)
        if get_origin(type_) is tuple and args and args[-1] is not Ellipsis:  # a fixed-length tuple
            return args[seg] if seg < len(args) else Any
        return args[0] if args else Any
    if get_origin(type_) is dict:
        return get_args(type_)[1]
    members = get_args(type_) if get_origin(type_) in (Union, types.UnionType) else (type_,)
    tags = [_tag(t) for t in members]
    if tags and all(field == seg for field, _ in tags):  # the tag itself: one of the members' tags
        return _OneOf(tuple(tag for _, tag in tags))
    fields = _fields(type_) if len(members) == 1 else {}
    return fields.get(str(seg), Any)


def _dict_value_type(type_: Any) -> Any:
    return get_args(type_)[1] if get_origin(type_) is dict else Any


def _failing_key(data: Any, value_type: Any) -> Segment:
    for key, value in data.items() if isinstance(data, dict) else ():
        try:
            msgspec.convert(value, value_type)
        except msgspec.ValidationError:
            return str(key)
    return "..."


def _fields(type_: Any) -> dict[str, Any]:
    if not isinstance(type_, type) or not issubclass(type_, msgspec.Struct):
        return {}
    return {f.encode_name: f.type for f in msgspec.structs.fields(type_)}


# ---------------------------------------------------------------- the words


def _say(msg: str, field: str, value: Any, declared: Any) -> str:
    """``n_max must be ..., got 0``; ``unknown key(s) x; valid keys: ...``; a rule's own text."""
    if m := re.match(r"Object contains unknown field `(.*)`$", msg):
        text = _unknown(value, _concrete(declared, value), m.group(1))
        return f"{field}: {text}" if field else text
    if m := re.match(r"Object missing required field `(.*)`$", msg):
        key = m.group(1)
        hint = _choices(_member_type(_concrete(declared, value), key, value), unions=False)
        where = f"{field}.{key}" if field else key
        return f"missing key `{where}` ({hint})" if hint else f"missing key `{where}`"
    must = None
    if msg.startswith(("Invalid enum value", "Invalid value")):
        must = _choices(declared)
    elif m := re.match(r"Expected `(.*?)`(?:, got `[^`]*`)?(.*)$", msg):
        must = _described(declared) or _choices(declared, unions=False)
        must = must or m.group(1).replace(" | null", "") + m.group(2)
    if must is None:  # a rule of the type (its __post_init__) or anything else: its text as written
        return f"{field}: {msg}" if field else msg
    got = "" if value is _MISSING else f", got {_short(value)}"
    return f"{field} must be {must}{got}".lstrip()


def _unknown(raw: Any, type_: Any, first: str) -> str:
    valid = sorted(_fields(type_))
    tag_field, tag = _tag(type_)
    given = list(raw) if isinstance(raw, dict) else [first]
    unknown = [k for k in given if k not in valid and k != tag_field] or [first]
    kind = f" for {tag_field} {tag!r}" if tag_field else ""
    return f"unknown key(s) {', '.join(unknown)}{kind}; valid keys: {', '.join(valid)}"


def _described(type_: Any) -> str | None:
    """The ``Meta(description=...)`` of the declared type (of the non-None member of ``X | None``)."""
    if get_origin(type_) in (Union, types.UnionType):
        found = (_described(t) for t in get_args(type_) if t is not type(None))
        return next((d for d in found if d), None)
    if get_origin(type_) is Annotated:
        metas = get_args(type_)[1:]
        return next((m.description for m in metas if isinstance(m, msgspec.Meta) and m.description), None)
    return None


def _choices(type_: Any, unions: bool = True) -> str | None:
    """``one of a, b, c`` for a ``Literal`` (or, with ``unions``, a union holding one) or a tag field."""
    while get_origin(type_) is Annotated:
        type_ = get_args(type_)[0]
    if isinstance(type_, _OneOf):
        return "one of " + ", ".join(str(v) for v in type_.values)
    if unions and get_origin(type_) in (Union, types.UnionType):
        return next(filter(None, map(_choices, get_args(type_))), None)
    if get_origin(type_) is Literal:
        return "one of " + ", ".join(str(v) for v in get_args(type_))
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _REPR_MAX else text[: _REPR_MAX - 3] + "..."
