"""``tally mcp``: the Stats API over the Model Context Protocol, for an assistant such as Claude Desktop.

The MCP client starts ``tally mcp`` and talks to it over stdin/stdout (the stdio transport). It
offers two tools: ``query``, whose arguments are a Plausible Stats API v2 request body and whose
result is the JSON ``POST /api/v2/query`` answers; and ``list_sites``, the sites the key may read.
Both go through :class:`api.answering.Answering`, the HTTP API's own path: the same key records,
scope, hourly limit and query layer, and the same error messages.

The API key comes from the environment variable ``TALLY_API_KEY`` (an MCP client's config sets
a server's environment); without a live key the server does not start. The key is checked
again on every call, so ``tally apikey revoke`` stops a running session too.

Only stdio: the SDK's HTTP authentication is OAuth 2.1 (a token verifier behind an authorization
server's issuer URL, with protected-resource metadata), which Tally's static keys would have to
fake; stdio needs no listening port and is how desktop MCP clients launch a local server.

The sites are conf/'s folded with the sites topic, followed for the session as the HTTP API
follows it (:class:`api.sites.SiteAdmin`): a site added with ``tally site add`` is listed and
answered. ``list_sites`` and a question about a site not known yet first wait (once, for at most
5 s) until the topic has been read.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)

from api.answering import Answering, Refused
from api.keys import ApiKey
from api.openapi import VITALS_NOTE, openapi_spec
from api.sites import SiteAdmin
from tally.log import kv
from tally.settings import Settings

API_KEY_ENV = "TALLY_API_KEY"
QUERY_TOOL, SITES_TOOL = "query", "list_sites"

log = logging.getLogger("tally.mcp")


class McpStartError(Exception):
    """``tally mcp`` cannot serve: the message says what to set or run first."""


def key_from_environment(answering: Answering, environ: Mapping[str, str]) -> ApiKey:
    """The live key record named by ``TALLY_API_KEY``; :class:`McpStartError` if it is missing or dead."""
    presented = environ.get(API_KEY_ENV, "").strip()
    if not presented:
        raise McpStartError(
            f"{API_KEY_ENV} is not set: create a key with `tally apikey create --name NAME --sites SITE`"
            f" and set {API_KEY_ENV} in the MCP client's configuration for this server"
        )
    key = answering.authenticate(presented)
    if key is None:
        raise McpStartError(
            f"the key in {API_KEY_ENV} is unknown, malformed or revoked (`tally apikey list` shows the keys):"
            " create one with `tally apikey create` and set it in the MCP client's configuration"
        )
    return key


def tools() -> list[Tool]:
    """The two tools; ``query``'s input and output schemas are the OpenAPI document's own."""
    post = openapi_spec()["paths"]["/api/v2/query"]["post"]
    body_schema = post["requestBody"]["content"]["application/json"]["schema"]
    answer_schema = post["responses"]["200"]["content"]["application/json"]["schema"]
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
    site = {"type": "object", "properties": {"site_id": {"type": "string"}, "domains": {"type": "array"}}}
    return [
        Tool(
            name=QUERY_TOOL,
            title="Query Tally's web analytics",
            description=(
                "Answer a Plausible Stats API v2 query over one site: the arguments are the request body"
                ' (e.g. {"site_id": "example.com", "date_range": "7d", "metrics": ["visitors", "pageviews"],'
                ' "dimensions": ["visit:source"]}); the result is {results, meta, query} as the HTTP API'
                f" answers. meta.metrics says which figures are exact. {VITALS_NOTE}. Use list_sites for the site ids."
            ),
            input_schema=body_schema,
            output_schema=answer_schema,
            annotations=read_only,
        ),
        Tool(
            name=SITES_TOOL,
            title="List the sites",
            description="The sites this API key may read: their site_id (for query) and domains.",
            input_schema={"type": "object", "properties": {}},
            output_schema={
                "type": "object",
                "required": ["sites"],
                "properties": {"sites": {"type": "array", "items": site}},
            },
            annotations=read_only,
        ),
    ]


def build_server(answering: Answering, presented: str, sites: SiteAdmin | None = None) -> Server[Any]:
    """The MCP server of one key (``presented``, checked again at every call); ``sites`` follows the
    sites topic (none: conf/'s sites alone)."""

    async def list_tools(ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=tools())

    async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        key = answering.authenticate(presented)
        if key is None:
            return _tool_error(
                Refused(401, f"the key in {API_KEY_ENV} is no longer valid (revoked?): set a live one and restart")
            )
        try:
            if sites is not None and _needs_topic(answering, params):
                await sites.settled()
            if params.name == SITES_TOOL:
                listed = [{"site_id": s.site_id, "domains": list(s.domains)} for s in answering.readable_sites(key)]
                return _tool_result({"sites": listed})
            if params.name != QUERY_TOOL:
                raise Refused(400, f"no tool {params.name!r}: the tools are {QUERY_TOOL} and {SITES_TOOL}")
            body = params.arguments or {}
            answering.admit(key)
            if len(json.dumps(body).encode()) > answering.settings.api.max_body_bytes:
                raise answering.body_too_large()
            return _tool_result(await anyio.to_thread.run_sync(answering.answer, key, body))
        except Refused as refused:
            log.info("tool refused", extra=kv(key=key.key_id, tool=params.name, status=refused.status))
            return _tool_error(refused)

    return Server("tally", on_list_tools=list_tools, on_call_tool=call_tool)


def _needs_topic(answering: Answering, params: CallToolRequestParams) -> bool:
    """Whether the call needs the runtime sites: every site listed, or a site conf/ does not name."""
    if params.name == SITES_TOOL:
        return True
    site_id = (params.arguments or {}).get("site_id")
    return isinstance(site_id, str) and answering.settings.site(site_id) is None


def _tool_result(answer: dict[str, Any]) -> CallToolResult:
    # Both forms: structured content for clients that read it, the same JSON as text for the rest.
    return CallToolResult(content=[TextContent(text=json.dumps(answer))], structured_content=answer)


def _tool_error(refused: Refused) -> CallToolResult:
    """A refusal as an MCP tool error: the HTTP API's message as text, its JSON body as structured content."""
    text = refused.message + (f" (retry in {refused.retry_after} s)" if refused.retry_after else "")
    return CallToolResult(content=[TextContent(text=text)], structured_content=refused.fields(), is_error=True)


def serve_stdio(settings: Settings, *, environ: Mapping[str, str] = os.environ) -> None:
    """Serve MCP over stdin/stdout until the client closes them; :class:`McpStartError` without a live key."""
    answering = Answering(settings)
    key = key_from_environment(answering, environ)
    sites = SiteAdmin(settings, answering)
    sites.start()
    server = build_server(answering, environ[API_KEY_ENV].strip(), sites)

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    log.info("mcp serving on stdio", extra=kv(key=key.key_id, sites=",".join(key.sites)))
    try:
        anyio.run(serve)
    finally:
        sites.close()
        answering.close()  # the raw question workers
