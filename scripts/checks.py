"""What the client scripts (reference_servers_client.py, oauth_client.py) share: one line per
check, `PASS name` or `FAIL name: why`, and the count of failures, their exit status."""

failures = 0


def check(name, ok, detail=""):
    global failures
    if not ok:
        failures += 1
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + str(detail)), flush=True)


def text(result):
    """The text blocks of a tool result, joined."""
    return " ".join(getattr(c, "text", "") for c in result.content)
