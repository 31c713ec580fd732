"""Option coercion without pydantic for the plain types, so a run does not import it.

typer (0.2x) coerces every parameter's value through a pydantic ``TypeAdapter`` that it
builds on first use, even for an option left at ``None``: the first one imports pydantic,
~0.1 s CPU, and building the adapters of one command costs ~0.03 s more, a tenth of a small
``crashscope analyze``. :func:`install` gives each parameter of the command being run a
:class:`_Plain` coercer, which does what typer's adapters do for the plain leaf types our
commands use, with typer's own helpers:

* ``None`` (an option left out), for every type: typer's ``RuntimeParam.coerce`` returns it
  without an adapter (typer built one all the same);
* ``str``: ``str(value)`` (bytes decoded as typer does);
* ``pathlib.Path``: the value made a path, then typer's ``coerce_cli_path`` (its checks of
  ``exists``, ``dir_okay`` ... unchanged; it needs pydantic only for a value that is not a
  path yet);
* an ``Enum``: typer's ``coerce_cli_choice``, its error worded as pydantic words it;
* a ``list[...]`` of these: each item.

Every other value (numbers, with their ``min``/``max``; dates; custom parsers; click types;
tuples; files) goes to typer's own coercer, built when the first value comes: the same
result and the same messages. If typer's internals are not what this expects (another version),
:func:`install` leaves the parameters alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

try:
    from typer._click.exceptions import BadParameter
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_choice, coerce_cli_path
    from typer.core import _TyperParameter
except ImportError:  # another typer: keep its own coercion
    RuntimeParam = None  # type: ignore[assignment,misc]


def _leaf_kind(annotation: Any, info: Any) -> str | None:
    """``str``, ``path`` or ``enum`` when typer's adapter for ``annotation`` is one of the
    plain ones this module reproduces, else ``None``."""
    if getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None:
        return None
    if annotation is str:
        return "str"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "enum"
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "path" if getattr(info, "path_type", None) in (None, annotation) else None
    return None


def _kind(descriptor: Any) -> tuple[str, bool] | None:
    """(leaf kind, is a list) for a descriptor this module coerces, else ``None``."""
    if descriptor.file_annotation is not None:
        return None
    ann, info = descriptor.annotation, descriptor.parameter_info
    if get_origin(ann) is list:
        args = get_args(ann)
        leaf = _leaf_kind(args[0], info) if len(args) == 1 else None
        return (leaf, True) if leaf else None
    leaf = _leaf_kind(ann, info)
    return (leaf, False) if leaf else None


if RuntimeParam is not None:

    @dataclass(frozen=True)
    class _Plain(RuntimeParam):  # type: ignore[misc,valid-type]
        descriptor: Any = None
        leaf: str = "str"
        many: bool = False
        _real: list[Any] = field(default_factory=list)

        def _typer(self) -> Any:
            if not self._real:
                self._real.append(build_runtime_param(self.descriptor))
            return self._real[0]

        def _one(self, value: Any, param: Any, ctx: Any, annotation: Any) -> Any:
            if self.leaf == "str":
                if isinstance(value, bytes):  # never from argv on Python 3; typer's own way
                    return self._typer()._coerce_value([value] if self.many else value, param=param, ctx=ctx)
                return str(value)
            try:
                if self.leaf == "enum":
                    return coerce_cli_choice(value, choices=list(annotation), case_sensitive=self.parameter_info.case_sensitive, ctx=ctx)
                path_type: Any = self.parameter_info.path_type or annotation
                if isinstance(value, (str, os.PathLike)) and not isinstance(value, path_type):
                    value = path_type(value)
                return coerce_cli_path(value, self.parameter_info, path_type=path_type, param=param, ctx=ctx)
            except ValueError as e:  # what pydantic makes of a validator's ValueError
                from typer._click.utils import _escape_control_characters

                raise BadParameter(_escape_control_characters(f"Value error, {e}"), ctx=ctx, param=param) from e

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if self.leaf == "typer":
                return self._typer()._coerce_value(value, param=param, ctx=ctx)
            if self.many:
                if not isinstance(value, (list, tuple)):
                    value = [value]
                (leaf_ann,) = get_args(self.annotation)
                return [self._one(v, param, ctx, leaf_ann) for v in value]
            return self._one(value, param, ctx, self.annotation)


def _install_param(p: Any) -> None:
    if not isinstance(p, _TyperParameter) or getattr(p, "_runtime_param", "missing") is not None:
        return
    d = getattr(p, "type_descriptor", None)
    if d is None:
        return
    # Not plain: typer's own coercer, built only when a value comes (``None``, an option left
    # out, needs none: typer built one for it all the same).
    leaf, many = _kind(d) or ("typer", False)
    p._runtime_param = _Plain(parameter_info=d.parameter_info, annotation=d.annotation, descriptor=d, leaf=leaf, many=many)


def install(command: Any) -> None:
    """Give ``command``'s parameters (and those of a group's subcommands, and the ``--help``
    option click makes for each when it parses) the plain coercer where it applies;
    idempotent."""
    if RuntimeParam is None:
        return
    todo = [command]
    while todo:
        cmd = todo.pop()
        todo.extend(getattr(cmd, "commands", {}).values())
        for p in getattr(cmd, "params", ()):
            _install_param(p)
        made = getattr(cmd, "get_help_option", None)
        if made is not None and not getattr(made, "_crashscope_plain", False):

            def get_help_option(ctx: Any, _made: Any = made) -> Any:
                opt = _made(ctx)
                if opt is not None:
                    _install_param(opt)
                return opt

            get_help_option._crashscope_plain = True  # type: ignore[attr-defined]
            cmd.get_help_option = get_help_option
