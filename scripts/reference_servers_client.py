"""Clients nobody here wrote, through mrtr-gateway, to servers nobody here wrote.

Run by scripts/reference-servers.sh, which starts the gateway in front of the official
`@modelcontextprotocol/server-everything` (an initialize-era server over Streamable HTTP, from
npm), `server-memory` and `server-filesystem` (initialize-era stdio servers, the latter serving
DATA), and the project's modern suite fixture. Usage:

    python reference_servers_client.py modern URL DATA   # Python SDK mcp 2.x, 2026-07-28
    python reference_servers_client.py legacy URL DATA   # Python SDK mcp 1.x, initialize era
    python reference_servers_client.py fault URL DATA    # mcp 2.x: read_graph under load while
                                                         # the script kills server-memory
    python reference_servers_client.py legacy-era URL DATA  # mcp 2.x negotiating by itself on
                                                         # the gateway's legacy-era path

Each check prints one line, `PASS name` or `FAIL name: why`; the exit status is the number of
failures (0: all passed).
"""

import asyncio
import sys
import traceback

import checks
from checks import check, text



def failed(result):
    """Whether a tool's result is an error (mcp 2.x spells it is_error, 1.x isError)."""
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


async def common(client, era, data):
    """What both clients must get: the merged lists, everything's tools, prompts, resources,
    and the stdio servers' tools."""
    tools = [t.name for t in (await client.list_tools()).tools]
    check(
        f"{era}: tools/list merges all four backends",
        all(t in tools for t in ("echo", "test_simple_text", "create_entities", "write_file")),
        tools,
    )
    entity = f"mrtr-{era}"
    created = await client.call_tool(
        "create_entities", {"entities": [{"name": entity, "entityType": "test", "observations": ["relayed"]}]}
    )
    check(f"{era}: memory's create_entities (stdio)", not failed(created), text(created))
    graph = await client.call_tool("read_graph", {})
    check(f"{era}: memory's read_graph has the entity", entity in text(graph), text(graph))
    path = f"{data}/{era}.txt"
    written = await client.call_tool("write_file", {"path": path, "content": f"hello from {era}"})
    check(f"{era}: filesystem's write_file (stdio)", not failed(written), text(written))
    read = await client.call_tool("read_text_file", {"path": path})
    check(f"{era}: filesystem's read_text_file", text(read) == f"hello from {era}", text(read))
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


async def modern(url, data):
    import mcp_types as types
    from mcp import Client

    progress = []

    async def on_progress(value, total, message):
        progress.append(value)

    async with Client(url) as client:
        check("modern: the session is 2026-07-28", client.protocol_version == "2026-07-28", client.protocol_version)
        tools = await common(client, "modern", data)
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
        await listen_to_everything(client)


async def listen_to_everything(client):
    """A 2026-07-28 listen of one of everything's resources: the gateway serves it from the
    legacy session's GET stream and subscribes with resources/subscribe; everything's
    toggle-subscriber-updates then sends an update at once (and every 5 s until toggled off)."""
    uris = [r.uri for r in (await client.list_resources()).resources if str(r.uri).startswith("demo://")]
    if not uris:
        check("modern: everything lists a demo:// resource to listen to", False, uris)
        return
    uri = str(uris[0])
    async with client.listen(resource_subscriptions=[uri]) as sub:
        honored = list(sub.honored.resource_subscriptions or [])
        check("modern: a listen of everything's resource is acknowledged with it", uri in honored, sub.honored)
        await client.call_tool("toggle-subscriber-updates", {})
        try:
            event = await asyncio.wait_for(sub.__anext__(), 15)
        except Exception as error:
            event = error
        check(
            "modern: everything's update of the resource reaches the listen",
            getattr(event, "uri", None) == uri,
            repr(event),
        )
        await client.call_tool("toggle-subscriber-updates", {})


async def legacy(url, data):
    import mcp.types as types
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    asked = []

    async def on_sampling(context, params):
        asked.append("sampling")
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="sampled by the test"), model="test"
        )

    async def on_elicitation(context, params):
        asked.append("elicitation")
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True})

    updates = asyncio.Queue()

    async def on_message(message):
        root = getattr(message, "root", None)
        if getattr(root, "method", None) == "notifications/resources/updated":
            updates.put_nowait(str(root.params.uri))

    async with streamablehttp_client(url) as (read, write, _):
        async with ClientSession(
            read,
            write,
            sampling_callback=on_sampling,
            elicitation_callback=on_elicitation,
            message_handler=on_message,
        ) as client:
            init = await client.initialize()
            check("legacy: initialize through the gateway", init.protocolVersion.startswith("2025-"), init.protocolVersion)
            tools = await common(client, "legacy", data)
            # The backend session of this client's requests declares its sampling and elicitation
            # capabilities: everything offers the tools, and their requests reach this client
            # during the call.
            check(
                "legacy: everything offers its elicitation and sampling tools to a client declaring them",
                "trigger-elicitation-request" in tools and "trigger-sampling-request" in tools,
                tools,
            )
            elicited = await client.call_tool("trigger-elicitation-request", {})
            check(
                "legacy: everything's elicitation request reaches the client in-request, and its answer the server",
                "elicitation" in asked and "Ada Lovelace" in text(elicited),
                text(elicited),
            )
            sampled = await client.call_tool("trigger-sampling-request", {"prompt": "hi", "maxTokens": 10})
            check(
                "legacy: everything's sampling request reaches the client in-request, and its answer the server",
                "sampling" in asked and "sampled by the test" in text(sampled),
                text(sampled),
            )
            # A subscription: made in this client's own backend session (where its tool calls go,
            # and where everything keeps subscriptions), its updates on this client's GET stream.
            uri = "demo://resource/static/document/architecture.md"
            await client.subscribe_resource(uri)
            await client.call_tool("toggle-subscriber-updates", {})
            try:
                updated = await asyncio.wait_for(updates.get(), 15)
            except Exception as error:
                updated = repr(error)
            check("legacy: everything's update of a subscribed resource reaches the client", updated == uri, updated)
            await client.call_tool("toggle-subscriber-updates", {})
            await client.unsubscribe_resource(uri)


async def legacy_era(url, data):
    """The Python SDK 2.x, in its default mode (`auto`: `server/discover` first), on the
    gateway's legacy-era path (`legacy-era-path = "/mcp-legacy"`, beside URL's `/mcp`): the
    gateway declines the probe there, the client falls back to `initialize`, and
    server-everything's elicitation request reaches it during the call, as for any legacy
    client. On `/mcp` the same client is 2026-07-28 and is not offered the tool (`modern`)."""
    import mcp_types as types
    from mcp import Client

    asked = []

    async def on_elicitation(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Grace Hopper", "check": True})

    legacy_url = url.rsplit("/mcp", 1)[0] + "/mcp-legacy"
    async with Client(legacy_url, elicitation_callback=on_elicitation) as client:
        check(
            "legacy-era path: the 2.x client fell back to initialize",
            client.protocol_version.startswith("2025-"),
            client.protocol_version,
        )
        tools = [t.name for t in (await client.list_tools()).tools]
        check(
            "legacy-era path: everything offers its elicitation tool to the client declaring it",
            "trigger-elicitation-request" in tools,
            tools,
        )
        elicited = await client.call_tool("trigger-elicitation-request", {})
        check(
            "legacy-era path: everything's elicitation reaches the 2.x client, and its answer the server",
            len(asked) == 1 and "Grace Hopper" in text(elicited),
            (asked, text(elicited)),
        )


async def fault(url, data):
    """read_graph from four workers for 6 s while server-memory is killed: every call ends
    (an answer or an error) within 10 s, and calls succeed again after the restart."""
    from mcp import Client

    outcomes = {"ok": 0, "error": 0, "hung": 0}
    last_ok = [0.0]
    loop = asyncio.get_running_loop()
    end = loop.time() + 6

    async def worker(client):
        while loop.time() < end:
            try:
                result = await asyncio.wait_for(client.call_tool("read_graph", {}), 10)
                outcomes["error" if failed(result) else "ok"] += 1
                if not failed(result):
                    last_ok[0] = loop.time()
            except asyncio.TimeoutError:
                outcomes["hung"] += 1
            except Exception:
                outcomes["error"] += 1
                await asyncio.sleep(0.05)

    async with Client(url) as client:
        await asyncio.gather(*(worker(client) for _ in range(4)))
        print(f"read_graph calls: {outcomes}", flush=True)
        check("fault: no call hung while the process was killed", outcomes["hung"] == 0, outcomes)
        check("fault: calls succeeded before and after", outcomes["ok"] > 0, outcomes)
        check("fault: calls succeed again by the end", end - last_ok[0] < 2, f"last success {end - last_ok[0]:.1f} s before the end")


def main():
    era, url, data = sys.argv[1], sys.argv[2], sys.argv[3]
    try:
        asyncio.run({"modern": modern, "legacy": legacy, "legacy-era": legacy_era, "fault": fault}[era](url, data))
    except Exception:
        traceback.print_exc()
        check(f"{era}: the client ran to its end", False, "exception above")
    sys.exit(checks.failures)


if __name__ == "__main__":
    main()
