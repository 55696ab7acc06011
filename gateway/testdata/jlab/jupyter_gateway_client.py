"""Drives a Jupyter server started with --gateway-url=aiod, through the
server's own REST API and kernel WebSocket, as a notebook front end would.

Usage: python3 jupyter_gateway_client.py http://127.0.0.1:PORT TOKEN
Prints one line per step and "ALL OK" at the end; exits 1 on the first failure.
"""
import json
import sys
import time
import urllib.error
import urllib.request
import uuid

import websocket  # python3-websocket (websocket-client)

BASE, TOKEN = sys.argv[1].rstrip("/"), sys.argv[2]
SESSION = uuid.uuid4().hex


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def http(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("Authorization", "token " + TOKEN)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def connect(kid):
    url = BASE.replace("http", "ws", 1) + f"/api/kernels/{kid}/channels?session_id={SESSION}&token={TOKEN}"
    return websocket.create_connection(url, timeout=60)


def request(ws, msg_type, content, channel="shell"):
    mid = uuid.uuid4().hex
    ws.send(json.dumps({
        "header": {"msg_id": mid, "msg_type": msg_type, "session": SESSION, "username": "test",
                   "date": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()), "version": "5.3"},
        "parent_header": {}, "metadata": {}, "content": content, "channel": channel, "buffers": [],
    }))
    return mid


def collect(ws, mid, reply_type, deadline=60, on_iopub=None, must=True):
    """Messages parented to mid until both the reply and iopub idle arrived."""
    end = time.time() + deadline
    reply, iopub, idle = None, [], False
    while time.time() < end and (reply is None or not idle):
        ws.settimeout(max(0.1, end - time.time()))
        try:
            raw = ws.recv()
        except websocket.WebSocketTimeoutException:
            break
        if isinstance(raw, bytes):
            fail("unexpected binary frame in the legacy protocol")
        m = json.loads(raw)
        if m.get("parent_header", {}).get("msg_id") != mid:
            continue
        if m["channel"] == "iopub":
            iopub.append(m)
            if on_iopub:
                on_iopub(m)
            if m["header"]["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                idle = True
        elif m["header"]["msg_type"] == reply_type:
            reply = m
    if (reply is None or not idle) and not must:
        return None, iopub
    if reply is None or not idle:
        fail(f"no {reply_type} and idle for {mid} within {deadline}s (reply={reply is not None}, idle={idle})")
    return reply, iopub


# stop_on_error is false: with true, ipykernel 6.17 aborts a request that
# arrives right after an error (here: right after the interrupt).
def execute(ws, code, **kw):
    mid = request(ws, "execute_request", {"code": code, "silent": False, "store_history": True,
                                          "user_expressions": {}, "allow_stdin": False, "stop_on_error": False})
    return collect(ws, mid, "execute_reply", **kw)


def stdout(iopub):
    return "".join(m["content"]["text"] for m in iopub if m["header"]["msg_type"] == "stream")


st, specs = http("GET", "/api/kernelspecs")
if st != 200 or "python3" not in specs["kernelspecs"]:
    fail(f"kernelspecs through the gateway: {st} {specs}")
print("kernelspecs ok:", sorted(specs["kernelspecs"]), flush=True)

st, model = http("POST", "/api/kernels", {"name": "python3"})
if st != 201:
    fail(f"start kernel: {st} {model}")
kid = model["id"]
print("started kernel", kid, flush=True)

st, kernels = http("GET", "/api/kernels")
if st != 200 or kid not in [k["id"] for k in kernels]:
    fail(f"list kernels: {st} {kernels}")

def connect_ready(kid):
    """Connects and sends kernel_info_request until answered, as
    jupyter_client does: jupyter server 1.23 drops a message that arrives
    before its own connection to the gateway is up."""
    ws = connect(kid)
    for _ in range(30):
        reply, _ = collect(ws, request(ws, "kernel_info_request", {}), "kernel_info_reply", deadline=2, must=False)
        if reply is not None:
            if reply["content"].get("implementation") != "ipython":
                fail(f"kernel_info_reply: {reply['content']}")
            return ws
    fail("no kernel_info_reply within 60 s")


ws = connect_ready(kid)

reply, iopub = execute(ws, "print(1)")
if reply["content"]["status"] != "ok" or stdout(iopub) != "1\n":
    fail(f"print(1): {reply['content']} {stdout(iopub)!r}")
print("print(1) ok", flush=True)

reply, iopub = execute(ws, "1/0")
errs = [m for m in iopub if m["header"]["msg_type"] == "error"]
if reply["content"]["status"] != "error" or not errs or errs[0]["content"]["ename"] != "ZeroDivisionError":
    fail(f"1/0: {reply['content']}")
print("1/0 ok: ZeroDivisionError", flush=True)

reply, _ = execute(ws, "x = 42")
started = {}
mid = request(ws, "execute_request", {"code": "print('spinning', flush=True)\nwhile True: pass", "silent": False,
                                      "store_history": True, "user_expressions": {}, "allow_stdin": False,
                                      "stop_on_error": False})


def interrupt_when_running(m):
    if m["header"]["msg_type"] == "stream" and not started:
        started["at"] = time.time()
        st, body = http("POST", f"/api/kernels/{kid}/interrupt")
        if st != 204:
            fail(f"interrupt: {st} {body}")


reply, iopub = collect(ws, mid, "execute_reply", on_iopub=interrupt_when_running)
if not started or reply["content"]["status"] != "error" or reply["content"].get("ename") != "KeyboardInterrupt":
    fail(f"interrupt: {reply['content']}")
print("interrupt ok: KeyboardInterrupt", flush=True)

reply, iopub = execute(ws, "print(x)")
if stdout(iopub) != "42\n":
    fail(f"state after interrupt: {stdout(iopub)!r} {reply['content']}")

st, model = http("POST", f"/api/kernels/{kid}/restart", {})
if st != 200 or model["id"] != kid:
    fail(f"restart: {st} {model}")
# The open socket was told, and keeps working with the new kernel.
states, end = [], time.time() + 10
while "restarting" not in states and time.time() < end:
    ws.settimeout(max(0.1, end - time.time()))
    m = json.loads(ws.recv())
    if m["channel"] == "iopub" and m["header"]["msg_type"] == "status":
        states.append(m["content"]["execution_state"])
if "restarting" not in states:
    fail(f"no status restarting on the open socket: {states}")
reply, iopub = execute(ws, "print('x' in dir())")
if stdout(iopub) != "False\n":
    fail(f"state survived the restart: {stdout(iopub)!r}")
print("restart ok: state gone", flush=True)
ws.close()

st, body = http("DELETE", f"/api/kernels/{kid}")
if st != 204:
    fail(f"delete: {st} {body}")
st, body = http("GET", f"/api/kernels/{kid}")
if st != 404:
    fail(f"kernel after delete: {st} {body}")
print("delete ok", flush=True)
print("ALL OK", flush=True)
