# aiod's restore of a Python session: run by aiod in a fresh kernel of the
# session as its own silent execution, with __aiod_user (the user
# namespace) and __aiod_args (a JSON string: {"payload": base64 of a
# snapshot's pickle, verified by aiod}, or {"path": a file aiod wrote the
# verified pickle to, removed once read}). It prints one line,
# "\x1eaiod-snapshot " + JSON: {"restored": [names], "skipped": {name: why}}
# or {"error": why}.
import base64
import importlib
import json
import os
import sys


def _emit(d):
    sys.stdout.write("\n\x1eaiod-snapshot " + json.dumps(d) + "\n")
    sys.stdout.flush()


def _restore(ns, args):
    try:
        import dill
    except Exception as e:
        return {"error": "dill is not importable in the session's Python (%s); install python3-dill" % e}
    try:
        if args.get("path"):
            with open(args["path"], "rb") as f:
                raw = f.read()
            try:
                os.remove(args["path"])
            except OSError:
                pass
        else:
            raw = base64.b64decode(args["payload"])
        state = dill.loads(raw)
        del raw
    except Exception as e:
        return {"error": "the snapshot could not be loaded (%s: %s)" % (type(e).__name__, str(e)[:300])}
    restored, skipped = [], {}
    cwd = state.get("cwd")
    if cwd:
        try:
            os.chdir(cwd)
        except Exception as e:
            skipped["(working folder)"] = "%s could not be entered again (%s)" % (cwd, e)
    for name, mod in state.get("modules", {}).items():
        try:
            ns[name] = importlib.import_module(mod)
            restored.append(name)
        except Exception as e:
            skipped[name] = "module %s could not be imported again (%s: %s)" % (mod, type(e).__name__, e)
    for name, v in state.get("values", {}).items():
        ns[name] = v
        restored.append(name)
    for name, f in state.get("files", {}).items():
        mode = f["mode"]
        if "w" in mode or "x" in mode:
            mode = mode.replace("w", "a").replace("x", "a")  # never truncate it
        try:
            fh = open(f["path"], mode)
            if f.get("pos") and fh.seekable() and "a" not in mode:
                fh.seek(f["pos"])
            ns[name] = fh
            restored.append(name)
        except Exception as e:
            skipped[name] = "the file %s could not be reopened (%s: %s)" % (f["path"], type(e).__name__, e)
    return {"restored": sorted(restored), "skipped": skipped}


try:
    _emit(_restore(__aiod_user, json.loads(__aiod_args)))
except BaseException as e:
    _emit({"error": "%s: %s" % (type(e).__name__, e)})
