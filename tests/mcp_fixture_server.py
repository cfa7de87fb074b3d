"""A small MCP server over stdio for tests/test_mcp.py: the result shapes and hint
combinations real servers send (an image, an error, no hints at all, an upsert,
structured content beyond its text), with every effect written to the file
``--effects FILE`` (or $EFFECTS_LOG) names, one line a call.

Arguments, since a server relaunched from a recipe gets no environment of ours:
``--effects FILE``; ``--pids FILE``, where the server adds its process id when it starts;
``--hints FILE``, a JSON object of the annotations (camelCase) of the tool ``tunable``,
read when the server starts (absent: no hints).
"""

import base64
import json
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import CallToolResult, TextContent, ToolAnnotations

server = MCPServer("fixture", log_level="WARNING")
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def option(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def effect(line: str) -> None:
    with Path(option("--effects") or os.environ["EFFECTS_LOG"]).open("a") as f:
        f.write(line + "\n")


HINTS = option("--hints")
TUNED = ToolAnnotations.model_validate(json.loads(Path(HINTS).read_text())) if HINTS else None


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
def upsert_note(key: str, text: str) -> str:
    """Store a note under a key (the same call twice leaves one note)."""
    effect(f"upsert {key}")
    return f"noted {key}"


@server.tool()
def no_hints(value: int) -> str:
    """A tool that says nothing about itself."""
    effect(f"no_hints {value}")
    return str(value * 2)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def chart() -> list:
    """A picture and a caption."""
    return [Image(data=PNG, format="png"), "one pixel"]


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def broken(why: str) -> str:
    """Always fails, saying why."""
    raise ToolError(f"cannot: {why}")


@server.tool(annotations=TUNED)
def tunable(value: int) -> str:
    """A tool whose hints the --hints file sets."""
    effect(f"tunable {value}")
    return f"tuned {value}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def forecast(city: str) -> CallToolResult:
    """A forecast as structured content, which its text does not carry whole."""
    days = [{"high": 21, "low": 12}, {"high": 19, "low": 11}]
    return CallToolResult(
        content=[TextContent(type="text", text=f"{city}: 21/12, then 19/11")],
        structured_content={"city": city, "days": days},
    )


if __name__ == "__main__":
    if option("--pids"):
        with Path(option("--pids") or "").open("a") as f:
            f.write(f"{os.getpid()}\n")
    server.run("stdio")
