#!/usr/bin/env python3
"""The dashboard and the alert rules of deploy/ against a real Prometheus and a real gateway.

Starts mrtr-gateway (--demo, plus a [[policy]], a [[rate-limit]], a principal header, a
backend that is down, an initialize-era HTTP backend (mock-backend --legacy) and an
initialize-era stdio backend (legacy-stdio-server)), a Prometheus (Debian's package) scraping its admin listener every second
with deploy/prometheus/alerts.yaml loaded, and drives a scripted mix of traffic: modern calls
with an MRTR round, a retry with a tampered requestState, a burst of them, a legacy client (with
an MRTR round bridged in its call: the gateway's elicitation answered on its own POST), calls
the policy denies, a rate limit reached, requests without a principal, a shed burst.
Then it fails unless:

* every metric the dashboard and the rules name is in the gateway's /metrics (a renamed metric
  fails here);
* every query of every dashboard panel returns data from Prometheus;
* MrtrGatewayBackendDown and MrtrGatewayEnvelopesRefused are active (pending or firing) during
  their faults, and MrtrGatewayBackendDown clears once the backend is started.

Usage: observability.py --bin-dir target/debug [--keep] [--plot FILE]  (scripts/observability.sh
runs it). --plot draws every panel from the run's data into a PNG with matplotlib (not needed
otherwise): the picture in docs/operations.md.
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = os.path.join(ROOT, "deploy/prometheus/alerts.yaml")
DASHBOARD = os.path.join(ROOT, "deploy/grafana/mrtr-gateway.json")
MODERN = "2026-07-28"
# PromQL words that are not metric names.
PROMQL_WORDS = {
    "sum", "max", "min", "count", "rate", "increase", "by", "without", "histogram_quantile",
    "le", "and", "or", "unless", "on", "ignoring", "vector", "avg",
}


def fail(message):
    print(f"observability: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, headers=None, timeout=10):
    """POSTs JSON; (status, headers, text)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    request.add_header("content-type", "application/json")
    request.add_header("accept", "application/json, text/event-stream")
    for k, v in (headers or {}).items():
        request.add_header(k, v)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def message(text):
    """The JSON-RPC response in a JSON or SSE answer."""
    text = text.strip()
    if text.startswith("{"):
        return json.loads(text)
    for line in text.splitlines():
        if line.startswith("data: "):
            data = json.loads(line[6:])
            if "id" in data and ("result" in data or "error" in data):
                return data
    return {}


class Modern:
    """A 2026-07-28 client of principal `user`."""

    def __init__(self, url, user):
        self.url, self.user, self.next = url, user, 0

    def call(self, method, params, name=None):
        self.next += 1
        params = dict(params)
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "observability", "version": "1"},
        }
        headers = {"mcp-protocol-version": MODERN, "mcp-method": method}
        if self.user:
            headers["x-user"] = self.user
        if name:
            headers["mcp-name"] = name
        body = {"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}
        status, _, text = post(self.url, body, headers)
        return status, message(text)

    def tool(self, name, arguments=None, **extra):
        return self.call("tools/call", {"name": name, "arguments": arguments or {}, **extra}, name)


def legacy_session(url, user):
    """An initialize-era client: initialize, initialized, a list, and a call whose MRTR round
    the gateway bridges in the call (an elicitation/create on the call's stream, answered by a
    POST of the client's while the call waits)."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "observability-legacy", "version": "1"}}}
    status, headers, text = post(url, init, {"x-user": user})
    session = headers.get("mcp-session-id")
    if status != 200 or not session:
        fail(f"legacy initialize: {status} {text}")
    common = {"x-user": user, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, common)
    status, _, text = post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, common)
    if status != 200:
        fail(f"legacy tools/list: {status} {text}")
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "alpha__delete_branch", "arguments": {"repo": "demo", "branch": "old"}}}
    parsed = urllib.parse.urlparse(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=10)
    connection.request("POST", parsed.path, json.dumps(call), {
        **common, "content-type": "application/json", "accept": "application/json, text/event-stream"})
    response = connection.getresponse()
    answered = False
    while True:
        line = response.readline().decode()
        if not line:
            fail("the legacy call's stream ended without its result")
        if not line.startswith("data:"):
            continue
        event = json.loads(line[5:])
        if event.get("method") == "elicitation/create" and not answered:
            answer = {"jsonrpc": "2.0", "id": event["id"],
                      "result": {"action": "accept", "content": {"confirm": True}}}
            status, _, text = post(url, answer, common)
            if status != 202:
                fail(f"the legacy client's answer: {status} {text}")
            answered = True
        elif event.get("id") == 3:
            if not answered or "result" not in event:
                fail(f"the legacy call's MRTR round was not bridged: {event}")
            break
    connection.close()


def drive(url):
    """The scripted traffic; returns a description of what was done."""
    alice = Modern(url, "alice")
    status, listed = alice.call("tools/list", {})
    if status != 200:
        fail(f"tools/list: {status} {listed}")
    # An MRTR round: the demo's delete_branch asks one confirmation.
    status, first = alice.tool("alpha__delete_branch", {"repo": "demo", "branch": "old"})
    result = first.get("result", {})
    if result.get("resultType") != "input_required":
        fail(f"delete_branch did not ask for input: {first}")
    state = result["requestState"]
    answers = {key: {"action": "accept", "content": {"confirm": True}} for key in result["inputRequests"]}
    status, done = alice.tool("alpha__delete_branch", {"repo": "demo", "branch": "old"},
                              inputResponses=answers, requestState=state)
    if done.get("result", {}).get("resultType") != "complete":
        fail(f"the retry did not complete: {done}")
    # A burst of tampered retries (the envelope alert's fault), after a first one has been
    # scraped: a counter's first sample counts no increase, so the burst must come after it.
    alice.tool("alpha__delete_branch", {"repo": "demo", "branch": "old"},
               inputResponses=answers, requestState=state[:-2] + "AA")
    time.sleep(3)
    for _ in range(150):
        status, refused = alice.tool("alpha__delete_branch", {"repo": "demo", "branch": "old"},
                                     inputResponses=answers, requestState=state[:-2] + "AA")
        if "error" not in refused:
            fail(f"a tampered requestState was not refused: {refused}")
    # Policy: mallory may call nothing.
    status, denied = Modern(url, "mallory").tool("alpha__whoami")
    if status != 403:
        fail(f"mallory's call was not refused by the policy: {status} {denied}")
    # Rate limit: two whoami a minute per principal.
    statuses = [alice.tool("alpha__whoami")[0] for _ in range(3)]
    if statuses[-1] != 429:
        fail(f"the rate limit did not answer 429: {statuses}")
    # No principal: refused at the front.
    status, _ = Modern(url, None).call("tools/list", {})
    if status != 403:
        fail(f"a request without a principal got {status}")
    legacy_session(url, "bob")
    # A keep-alive connection idle for two seconds is parked, then serves its next request.
    parsed = urllib.parse.urlparse(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=10)
    for _ in range(2):
        connection.request("GET", parsed.path)
        connection.getresponse().read()
        time.sleep(2)
    connection.close()
    # A burst over --max-in-flight: some are shed.
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        shed = list(pool.map(lambda _: Modern(url, "carol").call("tools/list", {})[0], range(64)))
    if 503 not in shed:
        fail(f"no request of the burst was shed: {sorted(set(shed))}")


def start_legacy_backend(bin_dir):
    """mock-backend --legacy: an initialize-era HTTP backend (the gateway holds a session with it)."""
    backend = subprocess.Popen([os.path.join(bin_dir, "mock-backend"), "--legacy"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = backend.stdout.readline()
    if " listening on " not in line:
        backend.kill()
        fail(f"mock-backend --legacy did not start: {line!r}")
    return backend, line.split()[-1]


def start_gateway(bin_dir, work, dead_port, legacy_url):
    binary = os.path.join(bin_dir, "mrtr-gateway")
    keys = os.path.join(work, "keys")
    entry = subprocess.run([binary, "--generate-key", "k1"], capture_output=True, text=True, check=True)
    with open(keys, "w") as f:
        f.write(entry.stdout)
    os.chmod(keys, 0o600)
    config = os.path.join(work, "gateway.toml")
    with open(config, "w") as f:
        f.write(f"""principal-header = "x-user"
keys-file = "{keys}"
health-interval = 1
max-in-flight = 4

[[backend]]
name = "gone"
url = "http://127.0.0.1:{dead_port}/mcp"

[[backend]]
name = "old"
url = "{legacy_url}"

[[backend]]
name = "pipe"
command = ["{os.path.join(bin_dir, "legacy-stdio-server")}", "pipe"]

# A stdio server that exits at once, started again and again (the stdio panels' fault).
[[backend]]
name = "dying"
command = ["sh", "-c", "exit 3"]

[[policy]]
principals = ["*"]
tools = ["*"]
prompts = ["*"]
resources = ["*"]

[[policy]]
principals = ["mallory"]
tools = ["*"]
effect = "deny"

[[rate-limit]]
per = "principal-and-tool"
tools = ["alpha__whoami"]
requests = 2
period = 60
""")
    log = open(os.path.join(work, "gateway.log"), "w")
    gateway = subprocess.Popen(
        [binary, "--demo", "--config", config,
         "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=log, text=True)
    url = admin = None
    deadline = time.time() + 60
    while (url is None or admin is None) and time.time() < deadline:
        line = gateway.stdout.readline()
        if not line:
            break
        if line.startswith("mrtr-gateway listening on "):
            url = line.split()[-1]
        elif line.startswith("mrtr-gateway admin listening on "):
            admin = line.split()[-1]
    if url is None or admin is None:
        gateway.kill()
        fail(f"the gateway did not start; its log is {log.name}")
    return gateway, url, admin, keys


def start_prometheus(work, admin):
    port = free_port()
    config = os.path.join(work, "prometheus.yml")
    target = urllib.parse.urlparse(admin).netloc
    with open(config, "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {RULES}
scrape_configs:
  - job_name: mrtr-gateway
    static_configs:
      - targets: ["{target}"]
""")
    binary = shutil.which("prometheus") or fail("no prometheus binary (apt-get install prometheus)")
    log = open(os.path.join(work, "prometheus.log"), "w")
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={work}/tsdb",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=log)
    return process, f"http://127.0.0.1:{port}"


def api(prometheus, path, **params):
    query = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{prometheus}/api/v1/{path}?{query}", timeout=10) as response:
        body = json.load(response)
    if body.get("status") != "success":
        fail(f"{path} {params}: {body}")
    return body["data"]


def wait_for(what, check, limit=120):
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            if check():
                return
        except (urllib.error.URLError, ConnectionError):
            pass  # Prometheus still starting
        time.sleep(1)
    fail(f"not within {limit} s: {what}")


def queries():
    """Every PromQL expression of the dashboard and of the rules."""
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    panel_queries = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]
    with open(RULES) as f:
        rules_text = f.read()
    # The rules' expressions, one per `expr:` (a `|` block runs to the next key).
    rule_exprs = re.findall(r"expr: \|\n((?:\s{12}.*\n)+)|expr: (.+)\n", rules_text)
    rule_queries = [(block or line).strip() for block, line in rule_exprs]
    return panel_queries, rule_queries


def metric_names(expr):
    names = set()
    for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", re.sub(r'"[^"]*"|\{[^}]*\}|\[[^]]*\]', " ", expr)):
        if word not in PROMQL_WORDS and word.startswith("mrtr_"):
            names.add(re.sub(r"_(bucket|sum|count)$", "", word))
    return names


def plot(prometheus, since, path):
    """Every panel of the dashboard, drawn from Prometheus's data since `since`, into `path`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(DASHBOARD) as f:
        panels = json.load(f)["panels"]
    columns = 3
    rows = (len(panels) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(18, 3.2 * rows))
    end = time.time()
    for axis, panel in zip(axes.flat, panels):
        axis.set_title(panel["title"], fontsize=10)
        for target in panel["targets"]:
            data = api(prometheus, "query_range", query=target["expr"], start=since, end=end, step=1)
            for series in data["result"]:
                legend = re.sub(r"\{\{(\w+)\}\}", lambda m: series["metric"].get(m.group(1), ""),
                                target["legendFormat"])
                xs = [float(t) - since for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                axis.plot(xs, ys, label=legend.strip() or "value")
        axis.set_xlabel("seconds into the run", fontsize=8)
        axis.tick_params(labelsize=8)
        if axis.lines:
            axis.legend(fontsize=7, loc="upper left")
    for axis in list(axes.flat)[len(panels):]:
        axis.axis("off")
    figure.suptitle("mrtr-gateway dashboard panels, from scripts/observability.py's Prometheus run")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    print(f"observability: panels drawn in {path}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--plot", help="draw the dashboard's panels from the run's data into this PNG")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="mrtr-observability-")
    dead_port = free_port()
    legacy, legacy_url = start_legacy_backend(args.bin_dir)
    try:
        gateway, url, admin, keys = start_gateway(args.bin_dir, work, dead_port, legacy_url)
    except SystemExit:
        legacy.kill()
        raise
    prometheus, prom = start_prometheus(work, admin)
    backend = None
    started = time.time()
    try:
        wait_for("Prometheus scraping the gateway", lambda: any(
            t["health"] == "up" for t in api(prom, "targets")["activeTargets"]))
        # Twice, a scrape apart: a counter's first sample counts no increase, so the second pass
        # is what the rates show.
        drive(url)
        time.sleep(2)
        drive(url)
        # A keys file that cannot be read: the reload is refused (and counted), the old keys kept.
        with open(keys, "w") as f:
            f.write("not a keyring entry\n")
        gateway.send_signal(signal.SIGHUP)
        # Rates over 5m windows need two samples after the traffic.
        time.sleep(5)

        exported = set()
        with urllib.request.urlopen(f"{admin}/metrics", timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line and not line.startswith("#"):
                    exported.add(re.sub(r"_(bucket|sum|count)$", "", re.split(r"[{ ]", line, maxsplit=1)[0]))
        panel_queries, rule_queries = queries()
        named = {n for _, e in panel_queries for n in metric_names(e)}
        named |= {n for e in rule_queries for n in metric_names(e)}
        missing = sorted(named - exported)
        if missing:
            fail(f"the dashboard or the rules name metrics the gateway does not export: {missing}")
        print(f"observability: every metric named by {len(panel_queries)} panel queries and "
              f"{len(rule_queries)} rules is exported")

        empty = [(title, expr) for title, expr in panel_queries
                 if not api(prom, "query", query=expr)["result"]]
        if empty:
            fail("panel queries without data: " + "; ".join(f"{t}: {e}" for t, e in empty))
        print(f"observability: all {len(panel_queries)} panel queries return data")

        def active(name, **labels):
            return any(a["labels"]["alertname"] == name and
                       all(a["labels"].get(k) == v for k, v in labels.items())
                       for a in api(prom, "alerts")["alerts"])

        wait_for("MrtrGatewayBackendDown for backend gone",
                 lambda: active("MrtrGatewayBackendDown", backend="gone"))
        wait_for("MrtrGatewayEnvelopesRefused", lambda: active("MrtrGatewayEnvelopesRefused"))
        print("observability: MrtrGatewayBackendDown and MrtrGatewayEnvelopesRefused are active")
        # The fault ends: a backend comes up where `gone` points.
        backend = subprocess.Popen(
            [os.path.join(args.bin_dir, "fixture-server"), "--suite", "--listen", f"127.0.0.1:{dead_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for("MrtrGatewayBackendDown to clear",
                 lambda: not active("MrtrGatewayBackendDown", backend="gone"))
        print(f"observability: MrtrGatewayBackendDown cleared; {time.time() - started:.0f} s in all")
        if args.plot:
            plot(prom, started, args.plot)
    finally:
        for process in (backend, prometheus, gateway, legacy):
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
        if args.keep:
            print(f"observability: logs in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
