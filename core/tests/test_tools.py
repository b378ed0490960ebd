"""Tool.from_function: schema from the signature, description from the docstring, argument checks."""

from __future__ import annotations

from typing import Literal

import pytest
from backchannel.framing import strip_id_prefix
from backchannel.tools import Tool, ToolArgumentError


async def lookup(
    query: str,
    limit: int = 5,
    exact: bool = False,
    mode: Literal["a", "b"] = "a",
    tags: list[str] | None = None,
) -> str:
    """Look something up.

    Longer explanation that is not part of the summary.

    Args:
        query: what to look for
        limit: how many results
    """
    return f"{query}:{limit}:{exact}:{mode}:{tags}"


def test_schema_comes_from_signature_and_docstring() -> None:
    tool = Tool.from_function(lookup)
    assert tool.name == "lookup"
    assert tool.description == "Look something up."
    props = tool.parameters["properties"]
    assert props["query"] == {"type": "string", "description": "what to look for"}
    assert props["limit"] == {"type": "integer", "description": "how many results", "default": 5}
    assert props["exact"] == {"type": "boolean", "default": False}
    assert props["mode"] == {"type": "string", "enum": ["a", "b"], "default": "a"}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert tool.parameters["required"] == ["query"]


async def test_arguments_are_checked_and_coerced() -> None:
    tool = Tool.from_function(lookup)
    assert await tool('{"query": "x", "limit": "#7"}') == "x:7:False:a:None"
    with pytest.raises(ToolArgumentError, match="missing required argument"):
        await tool({})
    with pytest.raises(ToolArgumentError, match="unknown argument"):
        await tool({"query": "x", "colour": 1})
    with pytest.raises(ToolArgumentError, match="not valid JSON"):
        await tool("{nope")
    with pytest.raises(ToolArgumentError, match="mode must be one of a, b"):
        await tool({"query": "x", "mode": "c"})


async def test_null_hostile_and_huge_arguments_get_one_clear_answer() -> None:
    tool = Tool.from_function(lookup)
    # null for an optional argument (strict-mode models, MCP clients) takes its default
    assert await tool({"query": "x", "limit": None, "mode": None}) == "x:5:False:a:None"
    with pytest.raises(ToolArgumentError, match="query must be a string, not NoneType"):
        await tool({"query": None})
    # half a surrogate pair becomes U+FFFD: no store or platform could take it
    assert await tool({"query": "paid \ud83d"}) == "paid \ufffd:5:False:a:None"
    # integers no store holds are refused by name, not an OverflowError deep in a store
    for huge in (2**63, -(2**63) - 1, 10**30, "9" * 30, 1e300):
        with pytest.raises(ToolArgumentError, match=r"^limit is out of range$"):
            await tool({"query": "x", "limit": huge})
    assert await tool({"query": "x", "limit": 2**63 - 1}) == f"x:{2**63 - 1}:False:a:None"
    # an int of more digits than Python writes out is still one clear error
    with pytest.raises(
        ToolArgumentError, match="mode must be one of a, b, not a int that cannot be shown"
    ):
        await tool({"query": "x", "mode": 10**5000})
    # a long value is quoted cut short: the error stays one readable line
    with pytest.raises(ToolArgumentError) as refused:
        await tool({"query": "x", "limit": "n" * 10_000})
    assert len(str(refused.value)) < 120
    # unknown names are the caller's: a call of 100,000 long ones is not echoed back whole
    many = {f"{n:06d}" + "x" * 100: 1 for n in range(100_000)}
    with pytest.raises(ToolArgumentError) as refused:
        await tool({"query": "x", **many})
    assert str(refused.value) == (
        "unknown argument(s): "
        + ", ".join(f"{n:06d}" + "x" * 34 + "..." for n in range(8))
        + " and 99992 more"
    )
    with pytest.raises(ToolArgumentError, match=r"^unknown argument\(s\): a, b$"):
        await tool({"query": "x", "b": 1, "a": 2})


async def test_sync_functions_become_awaitable() -> None:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    assert await Tool.from_function(add)({"a": 2, "b": 3}) == 5


def test_copied_id_prefix_is_stripped() -> None:
    assert strip_id_prefix("[#12] hello") == "hello"
    assert strip_id_prefix("[#x] hello") == "[#x] hello"
    assert strip_id_prefix("plain") == "plain"


async def test_decorated_tools_keep_their_own_schemas() -> None:
    import functools

    def logged(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            return function(*args, **kwargs)

        return wrapper

    @logged
    def weather(city: str) -> str:
        """Return the weather."""
        return f"sun in {city}"

    @logged
    def add(x: int, y: int) -> int:
        """Add two numbers."""
        return x + y

    first, second = Tool.from_function(weather), Tool.from_function(add)
    assert first.description == "Return the weather."
    assert second.description == "Add two numbers."
    assert list(second.parameters["properties"]) == ["x", "y"]
    assert await second({"x": 2, "y": 3}) == 5


async def test_tools_made_afresh_per_run_each_call_their_own_closure() -> None:
    # channel_tools makes the same closures for every run: what they describe is known
    # from their code after the first, but each tool must still call its own closure
    def make(greeting: str, asynchronous: bool) -> Tool:
        async def greet(name: str) -> str:
            """Greet someone."""
            return f"{greeting}, {name}"

        def greet_sync(name: str) -> str:
            """Greet someone, synchronously."""
            return f"{greeting}, {name}"

        return Tool.from_function(greet if asynchronous else greet_sync)

    for asynchronous in (True, False):
        hello, hi = make("hello", asynchronous), make("hi", asynchronous)
        assert hello.parameters is hi.parameters  # described once
        assert await hello({"name": "Ann"}) == "hello, Ann"
        assert await hi({"name": "Bo"}) == "hi, Bo"
    assert make("x", True).description == "Greet someone."
    assert make("x", False).description == "Greet someone, synchronously."


async def test_a_function_with_attributes_is_described_from_itself() -> None:
    async def tagged(city: str) -> str:
        """Return the weather."""
        return f"sun in {city}"

    tagged.label = "weather"  # type: ignore[attr-defined]
    tool = Tool.from_function(tagged, name="weather_now")
    assert (tool.name, tool.description) == ("weather_now", "Return the weather.")
    assert await tool({"city": "Oslo"}) == "sun in Oslo"


def test_functions_of_one_code_with_other_defaults_or_docs_keep_their_own_schemas() -> None:
    def make(limit: int, doc: str) -> Tool:
        def search(query: str, limit: int = limit) -> str:
            return query[:limit]

        search.__doc__ = doc
        return Tool.from_function(search)

    first, second = make(5, "Search the notes."), make(20, "Search the archive.")
    assert first.parameters["properties"]["limit"]["default"] == 5
    assert second.parameters["properties"]["limit"]["default"] == 20
    assert (first.description, second.description) == ("Search the notes.", "Search the archive.")

    # a default that cannot be a cache key is described afresh, not shared
    def listed(tags: list[str] | None = None, wanted: list[str] = ["a"]) -> str:  # noqa: B006
        return ""

    assert Tool.from_function(listed).parameters["properties"]["wanted"]["default"] == ["a"]
