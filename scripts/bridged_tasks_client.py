"""A raw 2026-07-28 JSON-RPC client that declares the Tasks extension (SEP-2663), elicitation and
sampling, driving bridged tasks through the gateway (scripts/bridged-tasks.sh). Standard library
only: no SDK ships Tasks for Python yet, and the wire is what is checked.

    python bridged_tasks_client.py flows URL          # the tasks of both backends, answered
    python bridged_tasks_client.py create URL TOOL ARGS_JSON
    python bridged_tasks_client.py until URL HANDLE STATUS SECONDS [TEXT]
    python bridged_tasks_client.py legacy-era URL     # mcp 2.x's python: the legacy-era path

`flows` prints one PASS or FAIL line per check and exits 1 if any failed. `create` prints the
task handle and the replica (nginx's X-Upstream) that made it. `until` polls tasks/get until the
task has STATUS (and its statusMessage contains TEXT), printing the last answer, then the
replicas that answered; exits 1 if not within SECONDS.
"""

import json
import sys
import time
import urllib.error
import urllib.request

VERSION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {
        "elicitation": {},
        "sampling": {},
        "extensions": {TASKS: {}},
    },
    "io.modelcontextprotocol/clientInfo": {"name": "bridged-tasks-client", "version": "0"},
}
NEXT_ID = [0]
PRINCIPAL = "tester"


def post(url, method, params, name=None):
    """One request; returns (JSON-RPC message, the replica nginx sent it to)."""
    NEXT_ID[0] += 1
    body = {"jsonrpc": "2.0", "id": NEXT_ID[0], "method": method, "params": {**params, "_meta": META}}
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": VERSION,
        "mcp-method": method,
        # The gateway's principal-header (scripts/bridged-tasks.sh).
        "x-principal": PRINCIPAL,
    }
    if name is not None:
        headers["mcp-name"] = name
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text, upstream = response.read().decode(), response.headers.get("x-upstream", "")
    except urllib.error.HTTPError as error:
        text, upstream = error.read().decode(), error.headers.get("x-upstream", "")
    return last_message(text), upstream


def last_message(text):
    """The JSON body, or the last JSON-RPC response of an SSE stream."""
    if text.lstrip().startswith("{"):
        return json.loads(text)
    found = None
    for line in text.splitlines():
        if line.startswith("data:"):
            message = json.loads(line[5:])
            if "result" in message or "error" in message:
                found = message
    return found or {"error": {"message": f"no response in: {text[:200]}"}}


def create(url, tool, arguments):
    """Calls TOOL; returns (task handle or None, the answer, the replica that made it)."""
    answer, upstream = post(url, "tools/call", {"name": tool, "arguments": arguments}, tool)
    result = answer.get("result", {})
    return (result.get("taskId") if result.get("resultType") == "task" else None), answer, upstream


def get(url, handle):
    return post(url, "tasks/get", {"taskId": handle}, handle)


def until(url, handle, status, seconds, text=""):
    """Polls until the task is STATUS with TEXT in its statusMessage; (ok, last result, replicas)."""
    deadline = time.monotonic() + seconds
    replicas, result = set(), {}
    while time.monotonic() < deadline:
        answer, upstream = get(url, handle)
        replicas.add(upstream)
        result = answer.get("result") or answer
        if result.get("status") == status and text in result.get("statusMessage", ""):
            return True, result, replicas
        time.sleep(0.2)
    return False, result, replicas


def answers_for(result, fill):
    """An inputResponses object answering every outstanding request with fill(method, params)."""
    requests = result.get("inputRequests") or {}
    return {key: fill(r["method"], r.get("params", {})) for key, r in requests.items()}


def fill(method, params):
    if method == "elicitation/create":
        properties = params.get("requestedSchema", {}).get("properties", {})
        content = {}
        for name, schema in properties.items():
            kind = schema.get("type")
            content[name] = (
                7 if kind in ("integer", "number") else True if kind == "boolean"
                else schema.get("enum", ["Ada Lovelace"])[0]
            )
        return {"action": "accept", "content": content}
    if method == "sampling/createMessage":
        return {"role": "assistant", "content": {"type": "text", "text": "sampled by the test"}, "model": "test"}
    if method == "roots/list":
        return {"roots": [{"uri": "file:///srv/project"}]}
    return {}


FAILED = []


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}: {name}" + ("" if ok else f" ({detail})"), flush=True)
    if not ok:
        FAILED.append(name)


def flow(url, label, tool, arguments, expect_method, expect_text):
    """A tool that asks: a task, polled and answered through the load balancer, completed."""
    handle, answer, owner = create(url, tool, arguments)
    check(f"{label}: the call answers a task", handle is not None, json.dumps(answer)[:300])
    if handle is None:
        return
    ok, result, replicas = until(url, handle, "input_required", 10)
    methods = [r.get("method") for r in (result.get("inputRequests") or {}).values()]
    check(f"{label}: tasks/get shows the backend's {expect_method}", ok and expect_method in methods, json.dumps(result)[:300])
    for _ in range(4):  # round-robin: at least one of four polls lands on the other replica
        replicas.add(get(url, handle)[1])
    check(f"{label}: polls answered by both replicas (owner {owner})", len(replicas - {""}) >= 2, str(replicas))
    ack, _ = post(url, "tasks/update", {"taskId": handle, "inputResponses": answers_for(result, fill)}, handle)
    check(f"{label}: tasks/update accepted", ack.get("result", {}).get("resultType") == "complete", json.dumps(ack)[:300])
    ok, result, _ = until(url, handle, "completed", 15)
    texts = [c.get("text", "") for c in result.get("result", {}).get("content", [])]
    check(f"{label}: completed with the backend's result", ok and any(expect_text in t for t in texts), json.dumps(result)[:400])


def flows(url):
    flow(url, "server-everything elicitation", "trigger-elicitation-request", {}, "elicitation/create", "Ada Lovelace")
    flow(url, "server-everything sampling", "trigger-sampling-request", {"prompt": "hi", "maxTokens": 10},
         "sampling/createMessage", "sampled by the test")
    flow(url, "FastMCP 1.x ctx.elicit", "book_table", {"date": "2026-12-24"}, "elicitation/create",
         "booked 7 for Ada Lovelace on 2026-12-24")
    flow(url, "FastMCP 1.x sampling", "summarize", {"text": "a long text"}, "sampling/createMessage",
         "summary: sampled by the test")
    flow(url, "FastMCP 1.x over stdio ctx.elicit", "book_table_stdio", {"date": "2026-12-25"},
         "elicitation/create", "booked 7 for Ada Lovelace on 2026-12-25")
    flow(url, "FastMCP 1.x over stdio sampling", "summarize_stdio", {"text": "a text"},
         "sampling/createMessage", "summary: sampled by the test")

    handle, answer, _ = create(url, "book_table", {"date": "2026-12-31"})
    check("cancel: the call answers a task", handle is not None, json.dumps(answer)[:300])
    if handle is not None:
        ack, _ = post(url, "tasks/cancel", {"taskId": handle}, handle)
        check("cancel: tasks/cancel accepted", ack.get("result", {}).get("resultType") == "complete", json.dumps(ack)[:300])
        ok, result, _ = until(url, handle, "cancelled", 10)
        check("cancel: the task is cancelled", ok, json.dumps(result)[:300])

    # A client that did not declare Tasks is told how to use the tool.
    saved = META["io.modelcontextprotocol/clientCapabilities"]
    META["io.modelcontextprotocol/clientCapabilities"] = {"elicitation": {}}
    answer, _ = post(url, "tools/call", {"name": "book_table", "arguments": {"date": "2027-01-01"}}, "book_table")
    META["io.modelcontextprotocol/clientCapabilities"] = saved
    check("without Tasks: no task, and the answer names the extension",
          "result" in answer and answer["result"].get("resultType") != "task" and TASKS in json.dumps(answer),
          json.dumps(answer)[:300])
    return 1 if FAILED else 0


async def legacy_era(url):
    """The other way, for SDKs without Tasks: the Python SDK 2.x in its default mode on the
    gateway's legacy-era path falls back to initialize, and FastMCP's ctx.elicit reaches it
    inside the call. Needs the mcp 2.x package (run with that venv's python)."""
    import httpx2
    import mcp_types as types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    asked = []

    async def on_elicitation(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"guests": 4, "name": "Grace Hopper"})

    legacy_url = url.rsplit("/mcp", 1)[0] + "/mcp-legacy"
    # The gateway's principal-header, sent with every request as the raw client's.
    http = httpx2.AsyncClient(headers={"x-principal": PRINCIPAL}, timeout=httpx2.Timeout(30, read=300))
    transport = streamable_http_client(legacy_url, http_client=http)
    async with http, Client(transport, elicitation_callback=on_elicitation) as client:
        check("legacy-era path: the 2.x client fell back to initialize",
              client.protocol_version.startswith("2025-"), client.protocol_version)
        result = await client.call_tool("book_table", {"date": "2027-04-04"})
        said = " ".join(getattr(c, "text", "") for c in result.content)
        check("legacy-era path: FastMCP's ctx.elicit reaches the 2.x client in its call, and its answer the server",
              len(asked) == 1 and said == "booked 4 for Grace Hopper on 2027-04-04", (asked, said))
    return 1 if FAILED else 0


def main(argv):
    command, url = argv[1], argv[2]
    if command == "flows":
        return flows(url)
    if command == "legacy-era":
        import asyncio

        return asyncio.run(legacy_era(url))
    if command == "create":
        handle, answer, upstream = create(url, argv[3], json.loads(argv[4]))
        if handle is None:
            print(json.dumps(answer), file=sys.stderr)
            return 1
        print(handle, upstream)
        return 0
    if command == "until":
        text = argv[6] if len(argv) > 6 else ""
        ok, result, replicas = until(url, argv[3], argv[4], float(argv[5]), text)
        print(json.dumps(result))
        print(" ".join(sorted(replicas)))
        return 0 if ok else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
