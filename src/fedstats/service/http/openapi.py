"""Each analysis's ``params`` as JSON Schema, in the server's OpenAPI document.

The options of an analysis live in one place, its config dataclass (``fedstats.wire.registry.ANALYSES``
names it). :func:`params_schema` derives the JSON Schema of a task's ``params`` from it: one property per
option a task may set (:meth:`~fedstats.analyses._config.AnalysisConfig.param_names`), typed from the
field's annotation, with its default, its description and, for options documented as a set of choices
(``method : {"adaptive", "weighted", "basic"}``), an ``enum``; required are the options without a default
and those the analysis requires of a task (``TASK_REQUIRED``). No property beyond these is allowed (the
config refuses unknown keys too). :func:`install_params_schemas` adds them to ``/openapi.json``: a schema
``Params_<analysis>_v<version>`` per analysis and ``TaskBody``, a ``oneOf`` of the task bodies keyed by
``analysis`` (and ``version``), which the ``task`` of the signed envelope (``SignedTaskIn``) refers to.
The schema describes; the server's check is still the config's own validation (ranges and combinations).
"""

from __future__ import annotations

import dataclasses
import re
import sys
import types
import typing
from typing import Any

from fastapi import FastAPI

from fedstats.wire.registry import ANALYSES, resolve

__all__ = ["install_params_schemas", "params_schema", "task_body_schemas"]

_SCALARS: dict[Any, dict[str, Any]] = {
    float: {"type": "number"},
    int: {"type": "integer"},
    str: {"type": "string"},
    bool: {"type": "boolean"},
}


def _type_schema(tp: Any) -> dict[str, Any]:
    """JSON Schema of one field annotation (scalars, ``X | None``, tuples)."""
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        parts = [{"type": "null"} if a is type(None) else _type_schema(a) for a in args]
        return {"anyOf": parts}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _type_schema(args[0])}
        return {
            "type": "array",
            "prefixItems": [_type_schema(a) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    return {}


def _documented(cls: type) -> dict[str, tuple[str, str]]:
    """``{name: (type text, description)}`` from the ``Parameters`` sections of ``cls`` and its bases."""
    out: dict[str, tuple[str, str]] = {}
    for klass in reversed(cls.__mro__):
        for name, (typ, text) in _documented_here(klass.__doc__ or "").items():
            if typ or name not in out:
                out[name] = (typ or out.get(name, ("", ""))[0], text)
    # "As :class:`Other`.": the option is documented on another config class of the same module
    module = sys.modules.get(cls.__module__)
    for name, (typ, text) in list(out.items()):
        ref = re.fullmatch(r"As :class:`~?\.?(\w+)`\.?", text)
        other = getattr(module, ref.group(1), None) if ref else None
        if isinstance(other, type) and other is not cls:
            out[name] = _documented(other).get(name, (typ, text))
    return out


def _documented_here(doc: str) -> dict[str, tuple[str, str]]:
    """``{name: (type text, description)}`` of one numpy-style docstring's ``Parameters`` section."""
    m = re.search(r"Parameters\n\s*-+\n(.*?)(?:\n\s*\n\s*[A-Z][a-z]+\n\s*-+\n|\Z)", doc, re.S)
    if not m:
        return {}
    out: dict[str, tuple[str, str]] = {}
    names: list[str] = []
    typ = ""
    lines: list[str] = []

    def flush() -> None:
        for n in names:
            out[n] = (typ, " ".join(" ".join(lines).split()))

    for line in m.group(1).splitlines():
        head = re.match(r"^ {4}(\w[\w, ]*?)(?:\s+:\s*(.*))?$", line)
        if head:
            flush()
            names = [n.strip() for n in head.group(1).split(",")]
            typ, lines = (head.group(2) or "").strip(), []
        elif line.strip():
            lines.append(line.strip())
    flush()
    return out


def _enum_of(type_text: str) -> list[str] | None:
    """The choices of a documented type ``{"a", "b"}``, or None."""
    m = re.match(r"^\{(.*)\}", type_text)
    if not m:
        return None
    choices = re.findall(r'"([^"]*)"', m.group(1))
    return choices or None


def params_schema(config_cls: type) -> dict[str, Any]:
    """The JSON Schema of a task's ``params`` for one analysis config class.

    Parameters
    ----------
    config_cls : type
        An :class:`~fedstats.analyses._config.AnalysisConfig` dataclass (e.g.
        :class:`fedstats.analyses.bitpushing.config.BitPushingMeanConfig`).

    Returns
    -------
    dict
        ``{"type": "object", "properties": ..., "required": ..., "additionalProperties": False}``.
    """
    hints = typing.get_type_hints(config_cls)
    docs = _documented(config_cls)
    names = config_cls.param_names()  # type: ignore[attr-defined]
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    props: dict[str, Any] = {}
    required: list[str] = []
    for name in names:
        f = fields[name]
        schema = _type_schema(hints.get(name, Any))
        type_text, text = docs.get(name, ("", ""))
        choices = _enum_of(type_text)
        if choices and schema.get("type") == "string":
            schema["enum"] = choices
        if text:
            schema["description"] = text
        if f.default is not dataclasses.MISSING:
            default = f.default
            schema["default"] = list(default) if isinstance(default, tuple) else default
        elif f.default_factory is dataclasses.MISSING:
            required.append(name)
        props[name] = schema
    for name in getattr(config_cls, "TASK_REQUIRED", ()):
        if name in props and name not in required:
            required.append(name)
    out: dict[str, Any] = {
        "title": f"params of {config_cls.__name__}",
        "type": "object",
        "properties": props,
        "additionalProperties": False,
    }
    if required:
        out["required"] = required
    return out


def task_body_schemas() -> dict[str, dict[str, Any]]:
    """Component schemas: ``Params_<analysis>_v<version>`` for each registered analysis, and ``TaskBody``.

    Returns
    -------
    dict
        Name to JSON Schema; ``TaskBody`` is a ``oneOf`` of one task body per analysis version, each
        fixing ``analysis`` and ``version`` by ``const`` and referring to its params schema.
    """
    comps: dict[str, dict[str, Any]] = {}
    variants = []
    for (name, version), spec in sorted(ANALYSES.items()):
        key = f"Params_{name.replace('-', '_')}_v{version}"
        comps[key] = params_schema(resolve(spec.config))
        comps[key]["title"] = f"params of {name} v{version}"
        variants.append(
            {
                "title": f"{name} v{version}",
                "type": "object",
                "properties": {
                    "analysis": {"const": name},
                    "version": {"const": version},
                    "params": {"$ref": f"#/components/schemas/{key}"},
                },
                "required": ["analysis", "params"],
            }
        )
    comps["TaskBody"] = {
        "title": "TaskBody",
        "description": "A task as an analyst signs it: one shape per analysis (keyed by `analysis` "
        "and `version`); the other fields (privacy, cohort_size, ...) are those of `TaskIn`.",
        "oneOf": variants,
    }
    return comps


def install_params_schemas(app: FastAPI) -> None:
    """Make ``app``'s OpenAPI document carry every analysis's ``params`` schema.

    Parameters
    ----------
    app : FastAPI
        The server's app; its ``openapi()`` is wrapped (the document is built once, then cached).
    """
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = plain()
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        schemas.update(task_body_schemas())
        signed = schemas.get("SignedTaskIn", {}).get("properties", {})
        if "task" in signed:
            signed["task"] = {
                "$ref": "#/components/schemas/TaskBody",
                "description": "The normalized task the analyst signed.",
            }
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
