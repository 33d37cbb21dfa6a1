"""``tally mcp`` driven by the MCP SDK's own client over stdio, as Claude Desktop launches it."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from tally.settings import PROJECT_ROOT

T = TypeVar("T")


def with_session(env: Mapping[str, str], key: str, scenario: Callable[[ClientSession], Awaitable[T]]) -> T:
    """Run ``scenario`` against ``python -m tally mcp`` started with ``env`` and the API key ``key``."""
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tally", "mcp"],
        env={**env, "TALLY_API_KEY": key},
        cwd=str(PROJECT_ROOT),
    )

    async def session() -> T:
        with anyio.fail_after(60):
            async with stdio_client(server) as (read, write), ClientSession(read, write) as client:
                await client.initialize()
                return await scenario(client)

    return anyio.run(session)


def text(result: CallToolResult) -> str:
    """A tool result's one text part."""
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text
