"""A real legacy MCP client (the official Python SDK, 1.x) through mrtr-gateway's dual-era front.

    python legacy_python_client.py http://127.0.0.1:PORT/mcp

The gateway must front the suite fixture (`fixture-server --suite`), a *modern* backend that asks
for input with MRTR. The SDK speaks the `initialize` era: it holds an Mcp-Session-Id and answers
server-to-client requests (elicitation, sampling) arriving on the POST's SSE stream; the gateway
bridges those to the backend's `input_required` rounds. Prints one line per check and ends with
'N passed, M failed'; exits non-zero on any failure.
"""

import sys

import anyio
import mcp
from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client

ELICITATIONS: list[str] = []
SAMPLINGS: list[str] = []


async def on_elicitation(context, params: types.ElicitRequestParams) -> types.ElicitResult:
    ELICITATIONS.append(params.message)
    return types.ElicitResult(action="accept", content={"username": "py-user", "email": "py@example.com"})


async def on_sampling(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    SAMPLINGS.append(params.messages[0].content.text)
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="Paris"),
        model="python-sdk-test",
        stopReason="endTurn",
    )


def text(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def main(url: str) -> int:
    results: list[tuple[str, bool, str]] = []

    def check(name: str, ok: bool, detail: str) -> None:
        results.append((name, ok, detail))
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")

    async with streamablehttp_client(url) as (read, write, session_id):
        async with ClientSession(
            read, write, elicitation_callback=on_elicitation, sampling_callback=on_sampling
        ) as session:
            init = await session.initialize()
            check(
                "initialize",
                init.protocolVersion.startswith("2025-") and session_id() is not None,
                f"protocol {init.protocolVersion}, server {init.serverInfo.name}, session id issued: {session_id() is not None}",
            )
            tools = [tool.name for tool in (await session.list_tools()).tools]
            check("tools/list", "test_elicitation" in tools, f"{len(tools)} tools")

            result = await session.call_tool("test_elicitation", {"message": "Who are you?"})
            body = text(result)
            check(
                "two rounds of elicitation",
                len(ELICITATIONS) == 2 and "py-user" in body and not result.isError,
                f"{len(ELICITATIONS)} elicitations ({ELICITATIONS}); result: {body}",
            )
            result = await session.call_tool("test_sampling", {"prompt": "What is the capital of France?"})
            body = text(result)
            check(
                "sampling",
                SAMPLINGS == ["What is the capital of France?"] and body == "LLM response: Paris",
                f"result: {body}",
            )
            result = await session.call_tool("test_simple_text", {})
            check("plain call", text(result) == "This is a simple text response for testing.", text(result))

    failed = sum(1 for _, ok, _ in results if not ok)
    print(f"python SDK {mcp_version()} (legacy client): {len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def mcp_version() -> str:
    from importlib.metadata import version

    return version("mcp")


if __name__ == "__main__":
    assert mcp  # the SDK is importable
    sys.exit(anyio.run(main, sys.argv[1]))
