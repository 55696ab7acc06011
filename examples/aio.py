"""The v2 contract's small helper for aiod's v2 routes.

Aio(base_url, token=None).post/get/delete return the envelope's ``data`` and
raise RuntimeError when ``success`` is false; ``.http`` is the underlying
httpx client for raw requests (downloads, status codes).

With a daemon started with a token T (``AIO_TOKEN=T aiod``, or ``--token-file``)
or ``--jwt-public-key``, pass ``token="T"`` (a token or a JWT), or set
``AIO_TOKEN``: it is sent as
``Authorization: Bearer T`` on every request.
"""
import os

import httpx


class Aio:
    def __init__(self, base_url, token=None, timeout=120.0):
        token = token if token is not None else os.environ.get("AIO_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base_url, timeout=timeout, headers=headers)

    def _unwrap(self, response):
        try:
            body = response.json()
        except ValueError:
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
        if not body.get("success"):
            raise RuntimeError(f"HTTP {response.status_code}: {body.get('message')}")
        return body.get("data")

    def post(self, path, /, **body):
        return self._unwrap(self.http.post(path, json=body))

    def get(self, path, /, **params):
        return self._unwrap(self.http.get(path, params=params))

    def delete(self, path, /, **params):
        return self._unwrap(self.http.delete(path, params=params))
