"""A small MCP server over stdio for tests/test_mcp.py: the result shapes and hint
combinations real servers send (an image, an error, no hints at all, an upsert), with
every effect written to the file $EFFECTS_LOG names, one line a call."""

import base64
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import ToolAnnotations

server = MCPServer("fixture", log_level="WARNING")
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def effect(line: str) -> None:
    with Path(os.environ["EFFECTS_LOG"]).open("a") as f:
        f.write(line + "\n")


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


if __name__ == "__main__":
    server.run("stdio")
