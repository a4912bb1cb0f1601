"""An initialize-era MCP server written the way most are: the Python SDK 1.x's FastMCP over
Streamable HTTP or stdio, whose tools ask the client mid-call (ctx.elicit, a sampling request).

Used by scripts/bridged-tasks.sh as the legacy backend whose own requests reach a 2026-07-28
client through the gateway's bridged tasks. Over HTTP it prints "listening on
http://127.0.0.1:PORT/mcp" once the server is up, like the project's own fixtures; over stdio
(the gateway starts it) its tools are named with "_stdio" after them, so that both can sit
behind one gateway without the gateway prefixing the names they share.

    python fastmcp1_elicit_server.py PORT
    python fastmcp1_elicit_server.py stdio
"""

import sys
import threading
import time
import urllib.request

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import SamplingMessage, TextContent
from pydantic import BaseModel

STDIO = sys.argv[1] == "stdio"
PORT = 0 if STDIO else int(sys.argv[1])
SUFFIX = "_stdio" if STDIO else ""
server = FastMCP("fastmcp1-elicit", host="127.0.0.1", port=PORT)


class Booking(BaseModel):
    guests: int
    name: str


@server.tool(name="book_table" + SUFFIX)
async def book_table(date: str, ctx: Context) -> str:
    """Books a table, asking the user for the party's size and name."""
    answer = await ctx.elicit(message=f"Who is coming on {date}?", schema=Booking)
    if answer.action != "accept":
        return f"no booking ({answer.action})"
    return f"booked {answer.data.guests} for {answer.data.name} on {date}"


@server.tool(name="summarize" + SUFFIX)
async def summarize(text: str, ctx: Context) -> str:
    """Summarizes text with the client's model (a sampling request)."""
    # Tied to the call, as ctx.elicit ties its request: without related_request_id the SDK sends
    # the request on the session's GET stream, where no call can claim it (docs/gateway.md).
    result = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarize: {text}"))],
        max_tokens=50,
        related_request_id=ctx.request_id,
    )
    content = result.content
    return f"summary: {content.text if isinstance(content, TextContent) else content}"


def announce() -> None:
    """Prints the URL once the port answers (uvicorn logs to stderr in its own words)."""
    url = f"http://127.0.0.1:{PORT}/mcp"
    for _ in range(300):
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=1)
        except urllib.error.HTTPError:
            break  # an HTTP answer (405, 406, 400): the server is up
        except OSError:
            time.sleep(0.1)
            continue
        break
    print(f"listening on {url}", flush=True)


if STDIO:
    server.run(transport="stdio")
else:
    threading.Thread(target=announce, daemon=True).start()
    server.run(transport="streamable-http")
