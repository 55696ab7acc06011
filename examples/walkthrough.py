"""The analysis walkthrough of the v2 contract, run against a live aiod.

Usage: python3 examples/walkthrough.py [BASE_URL] [OUT_DIR]
Prints what the contract's walkthrough prints (docs/v2-contract.md); a test
runs it and checks the output. It writes the downloaded chart as margin.png
into OUT_DIR (default: the current folder). With a daemon started with a
token (AIO_TOKEN=T aiod), set AIO_TOKEN=T here too. It deletes its session
at the end; the files it wrote stay in /tmp/analysis.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aio import Aio  # noqa: E402

BASE_URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:18091"
OUT_DIR = sys.argv[2] if len(sys.argv) > 2 else "."
SESSION = "analysis"
sb = Aio(BASE_URL)

# 1. The dataset, written through the file plane.
sb.post("/v2/fs/write", path="/tmp/analysis/sales.csv", content=(
    "month,revenue,cost\n2026-01,120,80\n2026-02,135,82\n2026-03,150,90\n"
    "2026-04,142,95\n2026-05,168,99\n2026-06,180,104\n"
))

# 2. Name a session, then load and compute in it.
first = sb.post("/v2/code/execute", language="python", session_id=SESSION, code="""
import pandas as pd
df = pd.read_csv("/tmp/analysis/sales.csv")
df["margin"] = df.revenue - df.cost
print(df.margin.describe())
""")
print(first["outputs"][0]["text"])

# 3. Plot in the same session, and save the chart into the sandbox.
sb.post("/v2/code/execute", language="python", session_id=SESSION, code="""
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
df.plot(x="month", y=["revenue", "cost"], kind="bar", figsize=(6, 3))
plt.tight_layout()
plt.savefig("/tmp/analysis/plot.png", dpi=120)
""")

# 4. The chart is a sandbox file now; the agent sees it on the file plane.
files = sb.get("/v2/fs/list", path="/tmp/analysis")["files"]
print([(f["name"], f["size"]) for f in files])

# 5. Download the bytes: attachment; filename="plot.png".
chart = sb.http.get("/v2/fs/download", params={"path": "/tmp/analysis/plot.png"})
print(len(chart.content))
print(chart.headers.get("content-disposition"))
open(os.path.join(OUT_DIR, "margin.png"), "wb").write(chart.content)

sb.delete(f"/v2/code/sessions/{SESSION}")

# A second delete of the same session is a 404.
again = sb.http.delete(f"/v2/code/sessions/{SESSION}")
print(again.status_code)
