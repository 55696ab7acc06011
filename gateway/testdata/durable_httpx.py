"""A real Python client of aiod's streams: httpx, iterating lines.

It starts an execution streamed as SSE, reads up to output seq 3, drops the
connection, resumes with Last-Event-ID and checks that every line came once;
then the same with NDJSON and ?after=. Prints "ok sse" and "ok ndjson".
Usage: durable_httpx.py BASE_URL
"""
import json
import sys

import httpx

BASE = sys.argv[1]
CODE = "import time\nfor i in range(1, 9):\n    print('line', i, flush=True)\n    time.sleep(0.15)"
WANT = "".join("line %d\n" % i for i in range(1, 9))


def sse_events(lines):
    ev = {}
    for line in lines:
        line = line.rstrip("\r\n")  # this httpx keeps line endings
        if line.startswith(":"):
            continue
        if not line:
            if ev:
                yield ev
            ev = {}
            continue
        key, _, value = line.partition(": ")
        ev[key] = value


def text_of(ev_data):
    d = json.loads(ev_data)
    return d["output"]["text"] if d.get("type") == "output" else ""


def check(kind, got, result):
    if got != WANT:
        sys.exit("%s: got %r, want %r" % (kind, got, WANT))
    if not result or not result.get("success") or result["data"]["stdout"] != WANT:
        sys.exit("%s: result %r" % (kind, result))
    print("ok", kind)


with httpx.Client(base_url=BASE, timeout=60) as c:
    # SSE, cut after seq 3, resumed with Last-Event-ID.
    body = {"language": "python", "code": CODE, "execution_id": "httpx-sse"}
    got, last = "", "0"
    with c.stream("POST", "/v2/code/execute", json=body, headers={"Accept": "text/event-stream"}) as r:
        r.raise_for_status()
        for ev in sse_events(r.iter_lines()):
            if ev.get("event") == "output":
                got += text_of(ev["data"])
                last = ev["id"]
                if last == "3":
                    break  # leaving the block closes the connection
    result = None
    with c.stream("GET", "/v2/code/executions/httpx-sse/events", headers={"Last-Event-ID": last}) as r:
        r.raise_for_status()
        for ev in sse_events(r.iter_lines()):
            if ev.get("event") == "output":
                got += text_of(ev["data"])
            elif ev.get("event") == "result":
                result = json.loads(ev["data"])
                break
    check("sse", got, result)

    # NDJSON, cut after seq 3, resumed with ?after=.
    body["execution_id"] = "httpx-ndjson"
    got, last = "", 0
    with c.stream("POST", "/v2/code/execute", json=body, headers={"Accept": "application/x-ndjson"}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.strip():
                continue
            d = json.loads(line)
            if d["type"] == "output":
                got += d["output"]["text"]
                last = d["seq"]
                if last == 3:
                    break
    result = None
    with c.stream("GET", "/v2/code/executions/httpx-ndjson/events?after=%d" % last, headers={"Accept": "application/x-ndjson"}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.strip():
                continue
            d = json.loads(line)
            if d.get("type") == "output":
                got += d["output"]["text"]
            elif "success" in d:
                result = d
                break
    check("ndjson", got, result)
