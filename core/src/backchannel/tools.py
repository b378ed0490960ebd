"""Tools: plain typed async functions offered to the agent, with a JSON schema each.

`Tool.from_function(fn)` reads the signature for the schema and the docstring
for the description (first paragraph) and per-argument descriptions (an
``Args:`` section, Google style).
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from attrs import field, frozen

from .wire import repair_text, shown

__all__ = ["Tool", "ToolArgumentError"]


class ToolArgumentError(ValueError):
    """The arguments given to a tool do not match its schema."""


@frozen
class Tool:
    """An executable function offered in a run: name, description, JSON schema, implementation."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    function: Callable[..., Awaitable[Any]] = field(repr=False)

    @classmethod
    def from_function(
        cls,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> Tool:
        """Build a Tool from a typed function; sync functions are wrapped to be awaitable."""
        summary, parameters, is_async = _describe(function)
        if is_async:
            implementation = function
        else:

            async def implementation(**kwargs: Any) -> Any:
                return function(**kwargs)

        return cls(name or function.__name__, description or summary, parameters, implementation)

    def coerce(self, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Parse and check `arguments` (a dict or a JSON string) against the schema."""
        if arguments is None or arguments == "":
            data: Any = {}
        elif isinstance(arguments, str):
            try:
                data = json.loads(arguments)
            except json.JSONDecodeError as error:
                raise ToolArgumentError(f"arguments are not valid JSON: {error.msg}") from None
        else:
            data = dict(arguments)
        if not isinstance(data, dict):
            raise ToolArgumentError("arguments must be a JSON object")
        properties = self.parameters.get("properties", {})
        unknown = sorted(set(data) - set(properties))
        if unknown:
            raise ToolArgumentError(f"unknown argument(s): {_some_names(unknown)}")
        required = self.parameters.get("required", [])
        # null for an optional argument means "left out" (models in strict mode, MCP
        # clients): it takes its default; a required one stays an error below
        data = {
            name: value for name, value in data.items() if value is not None or name in required
        }
        missing = [name for name in required if name not in data]
        if missing:
            raise ToolArgumentError(f"missing required argument(s): {', '.join(missing)}")
        for name, value in list(data.items()):
            data[name] = _coerce_value(name, value, properties[name])
        return data

    async def __call__(self, arguments: Mapping[str, Any] | str | None = None) -> Any:
        return await self.function(**self.coerce(arguments))

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    def to_anthropic(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": dict(self.parameters),
        }


#: (summary, JSON schema, is a coroutine function) by what they depend on
_described: dict[tuple[Any, ...], tuple[str, dict[str, Any], bool]] = {}


def _description_key(function: Callable[..., Any]) -> tuple[Any, ...] | None:
    """What a function's description depends on, or None when it cannot be cached.

    Closures made per run share a code object; decorated functions share their
    wrapper's, so the name goes in too; the docstring and the defaults (which
    the schema shows) may differ between functions of one code object.
    """
    # a plain function (no decorator, no attribute: channel_tools makes five per run)
    # wraps nothing, so it needs no unwrapping
    plain = type(function) is types.FunctionType and not function.__dict__
    inner = function if plain else inspect.unwrap(function)
    code = getattr(inner, "__code__", None)
    if code is None:
        return None
    kwdefaults = getattr(inner, "__kwdefaults__", None)
    return (
        code,
        getattr(function, "__qualname__", None),
        getattr(function, "__module__", None),
        getattr(function, "__doc__", None),
        getattr(inner, "__defaults__", None),
        tuple(sorted(kwdefaults.items())) if kwdefaults else None,
    )


def _describe(function: Callable[..., Any]) -> tuple[str, dict[str, Any], bool]:
    """Return (summary, JSON schema, is async) for a function, cached (see _description_key).

    Closures made afresh for every run share one code object, so the schema
    (which costs a type-hint evaluation) is computed once.
    """
    key = _description_key(function)
    if key is not None:
        try:
            cached = _described.get(key)
        except TypeError:  # a default that is a list or a dict: described afresh each time
            key = cached = None
        if cached is not None:
            return cached  # shared and never mutated: Tool.parameters is read-only by contract
    doc = inspect.getdoc(function) or ""
    summary, arg_docs = _parse_doc(doc)
    hints = typing.get_type_hints(function)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        schema = _schema_for(hints.get(parameter.name, str))
        if parameter.name in arg_docs:
            schema["description"] = arg_docs[parameter.name]
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
        elif parameter.default is not None:
            schema["default"] = parameter.default
        properties[parameter.name] = schema
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    described = (summary, parameters, inspect.iscoroutinefunction(function))
    if key is not None and len(_described) < 4096:
        _described[key] = described
    return described


_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
}


def _schema_for(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(options) == 1:
            return _schema_for(options[0])
        return {"anyOf": [_schema_for(a) for a in options]}
    if origin is typing.Literal:
        values = list(typing.get_args(annotation))
        return {"type": _JSON_TYPES.get(type(values[0]), "string"), "enum": values}
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple):
        args = typing.get_args(annotation)
        return {"type": "array", "items": _schema_for(args[0]) if args else {}}
    if origin is dict:
        return {"type": "object"}
    return {"type": _JSON_TYPES.get(annotation, "string")}


#: integers a store holds (SQLite's INTEGER, PostgreSQL's bigint) run from -_INT64 to _INT64 - 1
_INT64 = 2**63


#: unknown argument names quoted in an error, and characters of each: the names are the
#: caller's, and a call of a million names must not get a million back
_NAMES_SHOWN = 8
_NAME_CHARS = 40


def _some_names(names: list[str]) -> str:
    shown = [name if len(name) <= _NAME_CHARS else name[:_NAME_CHARS] + "..." for name in names]
    if len(shown) > _NAMES_SHOWN:
        return ", ".join(shown[:_NAMES_SHOWN]) + f" and {len(shown) - _NAMES_SHOWN} more"
    return ", ".join(shown)


def _coerce_value(name: str, value: Any, schema: Mapping[str, Any]) -> Any:
    kind = schema.get("type")
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(map(str, schema["enum"]))
        raise ToolArgumentError(f"{name} must be one of {allowed}, not {shown(value)}")
    if kind == "integer":
        if isinstance(value, bool):
            raise ToolArgumentError(f"{name} must be an integer, not {shown(value)}")
        number: int | None = None
        if isinstance(value, int):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str):
            text = value.strip().lstrip("#")
            if len(text) <= 40 and re.fullmatch(r"-?\d+", text):
                number = int(text)
        if number is None:
            raise ToolArgumentError(f"{name} must be an integer, not {shown(value)}")
        if not -_INT64 <= number < _INT64:  # no store holds it: say so, not OverflowError
            raise ToolArgumentError(f"{name} is out of range")
        return number
    if kind == "number":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        raise ToolArgumentError(f"{name} must be a number, not {shown(value)}")
    if kind == "string":
        if isinstance(value, str):
            return repair_text(value)  # half a surrogate pair: no store or platform takes it
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return str(value)
            except ValueError:  # an int of more digits than Python writes out
                raise ToolArgumentError(f"{name} is out of range") from None
        raise ToolArgumentError(f"{name} must be a string, not {type(value).__name__}")
    if kind == "boolean" and not isinstance(value, bool):
        raise ToolArgumentError(f"{name} must be true or false, not {shown(value)}")
    return value


def _parse_doc(doc: str) -> tuple[str, dict[str, str]]:
    paragraphs = doc.split("\n\n")
    summary = paragraphs[0].replace("\n", " ").strip() if paragraphs else ""
    args: dict[str, str] = {}
    match = re.search(r"^(?:Args|Arguments|Parameters):\s*\n(.*?)(?:\n\s*\n|\Z)", doc, re.S | re.M)
    if match:
        current = None
        for line in match.group(1).splitlines():
            found = re.match(r"\s*(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line)
            if found:
                current = found.group(1)
                args[current] = found.group(2).strip()
            elif current and line.strip():
                args[current] += " " + line.strip()
    return summary, args
