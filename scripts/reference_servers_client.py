"""Clients nobody here wrote, through mrtr-gateway, to servers nobody here wrote.

Run by scripts/reference-servers.sh, which starts the gateway in front of the official
`@modelcontextprotocol/server-everything` (an initialize-era server over Streamable HTTP, from
npm) and the project's modern suite fixture. Usage:

    python reference_servers_client.py modern URL    # Python SDK mcp 2.x, 2026-07-28
    python reference_servers_client.py legacy URL    # Python SDK mcp 1.x, initialize era

Each check prints one line, `PASS name` or `FAIL name: why`; the exit status is the number of
failures (0: all passed).
"""

import asyncio
import sys
import traceback

failures = 0


def check(name, ok, detail=""):
    global failures
    if not ok:
        failures += 1
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + str(detail)), flush=True)


def text(result):
    return " ".join(getattr(c, "text", "") for c in result.content)


async def common(client, era):
    """What both clients must get: the merged lists, everything's tools, prompts, resources."""
    tools = [t.name for t in (await client.list_tools()).tools]
    check(f"{era}: tools/list merges both backends", "echo" in tools and "test_simple_text" in tools, tools)
    echo = await client.call_tool("echo", {"message": "hi"})
    check(f"{era}: everything's echo", text(echo) == "Echo: hi", text(echo))
    total = await client.call_tool("get-sum", {"a": 2, "b": 3})
    check(f"{era}: everything's get-sum", "5" in text(total), text(total))
    fixture = await client.call_tool("test_simple_text", {})
    check(f"{era}: the modern fixture's tool beside it", "simple text" in text(fixture), text(fixture))
    prompts = [p.name for p in (await client.list_prompts()).prompts]
    check(f"{era}: prompts/list has everything's prompts", "simple-prompt" in prompts, prompts)
    prompt = await client.get_prompt("simple-prompt")
    check(f"{era}: everything's simple-prompt", len(prompt.messages) > 0, prompt)
    resources = (await client.list_resources()).resources
    check(f"{era}: resources/list has everything's resources", len(resources) > 0, resources)
    if resources:
        read = await client.read_resource(resources[0].uri)
        check(f"{era}: resources/read of {resources[0].uri}", len(read.contents) > 0, read)
    return tools


async def modern(url):
    import mcp_types as types
    from mcp import Client

    progress = []

    async def on_progress(value, total, message):
        progress.append(value)

    async with Client(url) as client:
        check("modern: the session is 2026-07-28", client.protocol_version == "2026-07-28", client.protocol_version)
        tools = await common(client, "modern")
        long = await client.call_tool(
            "trigger-long-running-operation", {"duration": 1, "steps": 3}, progress_callback=on_progress
        )
        check("modern: progress of everything's long operation reaches the client", len(progress) == 3, progress)
        check("modern: the long operation completes", "completed" in text(long), text(long))
        completion = await client.complete(
            types.PromptReference(type="ref/prompt", name="completable-prompt"), {"name": "department", "value": "E"}
        )
        check("modern: completion/complete", "Engineering" in completion.completion.values, completion)
        # server-everything offers its elicitation and sampling tools only to clients declaring
        # those capabilities; the gateway's sessions for modern clients declare none.
        check(
            "modern: everything's elicitation and sampling tools are not offered",
            "trigger-elicitation-request" not in tools and "trigger-sampling-request" not in tools,
            tools,
        )


async def legacy(url):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async with streamablehttp_client(url) as (read, write, _):
        async with ClientSession(read, write) as client:
            init = await client.initialize()
            check("legacy: initialize through the gateway", init.protocolVersion.startswith("2025-"), init.protocolVersion)
            await common(client, "legacy")


def main():
    era, url = sys.argv[1], sys.argv[2]
    try:
        asyncio.run(modern(url) if era == "modern" else legacy(url))
    except Exception:
        traceback.print_exc()
        check(f"{era}: the client ran to its end", False, "exception above")
    sys.exit(failures)


if __name__ == "__main__":
    main()
