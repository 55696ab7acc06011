"""Runs a two-cell notebook with nbclient through jupyter_server's
GatewayKernelManager (the gateway client papermill and nbclient users get
with --gateway-url) against BASE_URL, and prints the cells' outputs as JSON.

Usage: nbclient_gateway.py BASE_URL [TOKEN]
"""
import asyncio
import json
import sys

import nbformat
from jupyter_server.gateway.gateway_client import GatewayClient
from jupyter_server.gateway.managers import GatewayKernelManager
from nbclient import NotebookClient

base = sys.argv[1]
gw = GatewayClient.instance()
gw.url = base
gw.ws_url = "ws" + base[len("http"):]
if len(sys.argv) > 2:
    gw.auth_token = sys.argv[2]
gw.request_timeout = 60.0
gw.connect_timeout = 30.0
gw.load_connection_args()

nb = nbformat.v4.new_notebook()
nb.cells = [
    nbformat.v4.new_code_cell('import pandas as pd\ndf = pd.DataFrame({"a": [1, 2], "b": ["x", "<y>"]})\nprint("rows:", len(df))'),
    nbformat.v4.new_code_cell("df"),
]
# nbclient owns the manager it makes, so it shuts the kernel down and stops
# the client's channels (and its router thread) when the notebook is done.
client = NotebookClient(nb, kernel_manager_class=GatewayKernelManager, timeout=60, startup_timeout=60,
                        kernel_name="python3")


async def main():
    await client.async_execute()


asyncio.run(main())
print(json.dumps([cell.outputs for cell in nb.cells]))
