"""The agent_sandbox SDK's walkthrough and examples, over plain httpx.

Usage: python3 examples/v1_sdk_walkthrough.py [BASE_URL] [DIR]

The SDK is not needed: V1 below sends each call exactly as the SDK's
generated client does (docs/v1-compat.md, What the SDK sends): the URL is
urljoin(base_url + "/", "v1/..."), every request carries X-Fern-Language:
Python and content-type: application/json, a body holds only the arguments
given (None is sent as null), and a call with no arguments sends no body
(httpx then sends Content-Length: 0). It returns the envelope's data and
raises when the answer is not 2xx or not a JSON object. At the end it
deletes the sessions it made, so a second run starts from nothing; the
files stay in DIR.
"""
import os
import sys
from urllib.parse import urljoin

import httpx

BASE_URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:18091"
DIR = sys.argv[2] if len(sys.argv) > 2 else "/tmp/analysis"


class V1:
    def __init__(self, base_url, token=None, timeout=120.0):
        self.base_url = base_url
        # With a token T (AIO_TOKEN=T aiod), the SDK is given headers={"Authorization": "Bearer T"}.
        token = token if token is not None else os.environ.get("AIO_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(timeout=timeout, follow_redirects=True, headers=headers)

    def _url(self, path):
        return urljoin(self.base_url + "/", path)

    def call(self, method, path, body=None, params=None):
        kw = {"headers": {"X-Fern-Language": "Python", "content-type": "application/json"}}
        if body:
            kw["json"] = body
        if params:
            kw["params"] = {k: v for k, v in params.items() if v is not None}
        r = self.http.request(method, self._url(path), **kw)
        if not 200 <= r.status_code < 300:
            raise RuntimeError(f"{method} {path}: HTTP {r.status_code}: {r.text[:300]}")
        env = r.json()
        if not isinstance(env, dict):
            raise RuntimeError(f"{method} {path}: answer is not a JSON object: {r.text[:300]}")
        return env.get("data")

    def download(self, path):
        with self.http.stream("GET", self._url("v1/file/download"), params={"path": path},
                              headers={"X-Fern-Language": "Python"}) as r:
            if r.status_code != 200:
                raise RuntimeError(f"download {path}: HTTP {r.status_code}")
            return b"".join(r.iter_bytes())


client = V1(BASE_URL)

# 1. client.file.write_file(file=..., content=...)
client.call("POST", "v1/file/write", {"file": f"{DIR}/sales.csv", "content": (
    "month,revenue,cost\n2026-01,120,80\n2026-02,135,82\n2026-03,150,90\n"
    "2026-04,142,95\n2026-05,168,99\n2026-06,180,104\n")})

# 2. client.jupyter.create_session().data.session_id: no body at all.
session_id = client.call("POST", "v1/jupyter/sessions/create")["session_id"]

first = client.call("POST", "v1/jupyter/execute", {"session_id": session_id, "code": f"""
import pandas as pd
df = pd.read_csv("{DIR}/sales.csv")
df["margin"] = df.revenue - df.cost
print(df.margin.describe())
"""})
print(first["outputs"][0]["text"])

# 3. Plot in the same session and save the chart.
client.call("POST", "v1/jupyter/execute", {"session_id": session_id, "code": f"""
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
df.plot(x="month", y=["revenue", "cost"], kind="bar", figsize=(6, 3))
plt.tight_layout()
plt.savefig("{DIR}/plot.png", dpi=120)
"""})

# 4. client.file.list_path(path=...).data.files
files = client.call("POST", "v1/file/list", {"path": DIR})["files"]
print([(f["name"], isinstance(f["size"], int)) for f in files])

# 5. b"".join(client.file.download_file(path=...))
chart = client.download(f"{DIR}/plot.png")
print(len(chart))
os.makedirs(DIR, exist_ok=True)  # under tenant isolation DIR above is the tenant's, not this host's
with open(os.path.join(DIR, "margin.png"), "wb") as f:
    f.write(chart)

# 6. client.jupyter.delete_session(session_id=...)
client.call("DELETE", f"v1/jupyter/sessions/{session_id}")

# One-shot: client.code.execute_code(language=..., code=...)
py = client.call("POST", "v1/code/execute", {"language": "python", "code": "print(sum([1,2,3]))"})
js = client.call("POST", "v1/code/execute", {"language": "javascript",
                                             "code": "console.log([1,2,3].reduce((a,b)=>a+b))"})
print(py["stdout"].strip(), js["stdout"].strip())

# Session reuse, Python and JavaScript, both under "s1".
client.call("POST", "v1/code/execute", {"language": "python", "code": "x = 21", "session_id": "s1"})
r = client.call("POST", "v1/code/execute", {"language": "python", "code": "print(x * 2)", "session_id": "s1"})
print(r["stdout"].strip())
client.call("POST", "v1/nodejs/execute", {"code": "globalThis.n = 41", "session_id": "s1"})
r = client.call("POST", "v1/nodejs/execute", {"code": "console.log(n + 1)", "session_id": "s1"})
print(r["stdout"].strip())
assert r["language"] == "javascript" and isinstance(r["exit_code"], int)

# Leave nothing running: client.jupyter.delete_session and client.nodejs.delete_session.
client.call("DELETE", "v1/jupyter/sessions/s1")
client.call("DELETE", "v1/nodejs/sessions/s1")
print("done")
