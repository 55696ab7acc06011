# aiod's snapshot of a Python session: run by aiod in the session's kernel
# as its own silent execution, with __aiod_user (the user namespace) and
# __aiod_args (a JSON string: {"max_bytes", "out"}). It prints one line,
# "\x1eaiod-snapshot " + JSON: {"payload": base64 of dill's pickle,
# "saved": [names], "skipped": {name: why}, "reopened": {name: how}} or
# {"error": why}. With "out" (a new file's path in a folder aiod reads
# too), the pickle goes there instead of "payload", and "bytes" says its
# size: a payload of hundreds of megabytes then never passes through
# stdout. Nothing is added to the user namespace.
import base64
import inspect
import io
import json
import os
import re
import socket
import sys
import threading
import types


def _emit(d):
    sys.stdout.write("\n\x1eaiod-snapshot " + json.dumps(d) + "\n")
    sys.stdout.flush()


def _snapshot(ns, args):
    try:
        import dill
    except Exception as e:
        return {"error": "dill is not importable in the session's Python (%s); install python3-dill" % e}
    max_bytes = int(args["max_bytes"])
    hidden = set()
    ip = ns.get("get_ipython")
    if callable(ip):
        try:
            hidden = set(ip().user_ns_hidden)
        except Exception:
            pass
    cache = re.compile(r"^_(i{1,3}|\d+|i\d+|oh|dh|ih|_{0,2})$")
    values, modules, files = {}, {}, {}
    skipped, reopened, sizes = {}, {}, {}
    for name, v in list(ns.items()):
        if name in hidden or cache.match(name) or (name.startswith("__") and name.endswith("__")):
            continue
        if name in ("In", "Out", "exit", "quit", "get_ipython"):
            continue
        if isinstance(v, types.ModuleType):
            modules[name] = v.__name__
            continue
        if inspect.isgenerator(v) or inspect.isasyncgen(v):
            skipped[name] = "a generator: where it stopped cannot be saved"
            continue
        if inspect.iscoroutine(v):
            skipped[name] = "a coroutine: where it stopped cannot be saved"
            continue
        if isinstance(v, threading.Thread):
            skipped[name] = "a thread: a running thread cannot be saved"
            continue
        if isinstance(v, socket.socket):
            skipped[name] = "a socket: an open connection cannot be saved"
            continue
        if isinstance(v, io.IOBase):
            path = getattr(v, "name", None)
            if v.closed:
                skipped[name] = "a closed file"
            elif isinstance(path, str) and os.path.isfile(path):
                mode = getattr(v, "mode", "r")
                try:
                    pos = v.tell() if v.seekable() else 0
                except Exception:
                    pos = 0
                files[name] = {"path": os.path.abspath(path), "mode": mode, "pos": pos}
                reopened[name] = "an open file: reopened by path %s (mode %s, at byte %d)" % (os.path.abspath(path), mode, pos)
            else:
                skipped[name] = "an open file or stream with no path to reopen it by"
            continue
        values[name] = v
    state = {"values": values, "modules": modules, "files": files, "cwd": os.getcwd()}
    try:
        payload = dill.dumps(state, recurse=True)  # the usual case: all at once
    except Exception:
        payload = None
    if payload is not None and len(payload) <= max_bytes:
        return _answer(payload, values, modules, files, skipped, reopened, args.get("out"))
    # Something does not serialize, or the whole is too large: value by
    # value, to name what is skipped and why.
    for name, v in list(values.items()):
        try:
            b = dill.dumps(v, recurse=True)
        except Exception as e:
            skipped[name] = "cannot be serialized (%s: %s)" % (type(e).__name__, str(e)[:200])
            del values[name]
            continue
        if len(b) > max_bytes:
            skipped[name] = "over the size limit (%d bytes; a snapshot may hold %d)" % (len(b), max_bytes)
            del values[name]
            continue
        sizes[name] = len(b)
    while True:
        state = {"values": values, "modules": modules, "files": files, "cwd": os.getcwd()}
        try:
            payload = dill.dumps(state, recurse=True)
        except Exception as e:
            return {"error": "the namespace could not be serialized as a whole (%s: %s)" % (type(e).__name__, str(e)[:300])}
        if len(payload) <= max_bytes or not values:
            break
        big = max(values, key=lambda n: sizes[n])
        skipped[big] = "over the size limit (%d bytes; with it the snapshot passed %d)" % (sizes[big], max_bytes)
        del values[big]
    if len(payload) > max_bytes:
        return {"error": "the snapshot would be %d bytes, over its limit %d" % (len(payload), max_bytes)}
    return _answer(payload, values, modules, files, skipped, reopened, args.get("out"))


def _answer(payload, values, modules, files, skipped, reopened, out):
    saved = sorted(list(values) + list(modules) + list(files))
    d = {"saved": saved, "skipped": skipped, "reopened": reopened}
    if not out:
        d["payload"] = base64.b64encode(payload).decode("ascii")
        return d
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(payload)
    d["bytes"] = len(payload)
    return d


try:
    _emit(_snapshot(__aiod_user, json.loads(__aiod_args)))
except BaseException as e:
    _emit({"error": "%s: %s" % (type(e).__name__, e)})
