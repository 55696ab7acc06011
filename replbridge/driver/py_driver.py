# py_driver.py: the replbridge driver for Python (standard library only).
# Started by replbridge (Go) with the command pipe on fd 3 and the control
# pipe on fd 4; fd 1 and 2 are the real stdout/stderr pipes. Protocol:
#   fd 3, in:  one JSON object per line {"code", "token", "silent"}, or
#              {"type":"complete"|"inspect","id","code","cursor_pos","detail_level"}.
#   fd 4, out: {"type":"ready","version"} once, then per command
#              {"type":"done","status","result"?,"error"?{ename,evalue,traceback}}
#              written after the end marker ("\0aiod:end:"+token+"\0") has
#              been written to fd 1 and fd 2; for complete and inspect,
#              {"type":"complete_reply","id","matches","cursor_start","cursor_end"} or
#              {"type":"inspect_reply","id","found","text"} (between executions:
#              the driver runs one thing at a time).
import ast
import inspect
import json
import linecache
import os
import pkgutil
import platform
import re
import rlcompleter
import signal
import sys
import traceback
import types

DRIVER_FILE = sys._getframe().f_code.co_filename
_state = {"executing": False, "cell": 0}


def _on_sigint(signum, frame):
    # Outside user code an interrupt is ignored, so the driver never dies
    # from a late SIGINT.
    if _state["executing"]:
        raise KeyboardInterrupt


def _compile(code, filename):
    tree = ast.parse(code, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, filename, "exec")
    expr = compile(last, filename, "eval") if last is not None else None
    return body, expr


def _user_tb(tb):
    while tb is not None and tb.tb_frame.f_code.co_filename == DRIVER_FILE:
        tb = tb.tb_next
    return tb


def _error(exc):
    if isinstance(exc, SyntaxError):
        lines = traceback.format_exception_only(type(exc), exc)
    else:
        lines = traceback.format_exception(type(exc), exc, _user_tb(exc.__traceback__))
    tb = "".join(lines).rstrip("\n").split("\n")
    return {"ename": type(exc).__name__, "evalue": str(exc), "traceback": tb}


def _execute(code, env):
    _state["cell"] += 1
    filename = "<cell-%d>" % _state["cell"]
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        _state["executing"] = True
        body, expr = _compile(code, filename)
        exec(body, env)
        value = eval(expr, env) if expr is not None else None
        _state["executing"] = False
    except BaseException as exc:  # KeyboardInterrupt and SystemExit included
        _state["executing"] = False
        return {"status": "error", "error": _error(exc)}
    reply = {"status": "ok"}
    if value is not None:
        try:
            reply["result"] = repr(value)
        except BaseException as exc:
            return {"status": "error", "error": _error(exc)}
    return reply


_IMPORT = re.compile(r"^\s*(?:import|from)\s+([\w.]*)$")
_NAME = re.compile(r"[\w.]*$")


def _modules(prefix):
    """Module names for an import statement: top-level ones, or the
    submodules of a package for a dotted prefix."""
    pkg, _, part = prefix.rpartition(".")
    names = set()
    if pkg:
        try:
            mod = __import__(pkg, fromlist=["_"])
            for m in pkgutil.iter_modules(getattr(mod, "__path__", [])):
                names.add(pkg + "." + m.name)
        except Exception:
            pass
    else:
        names.update(sys.builtin_module_names)
        names.update(m.name for m in pkgutil.iter_modules())
    # Private modules only when the prefix asks for them.
    return sorted(n for n in names if n.startswith(prefix) and (part.startswith("_") or not n.rsplit(".", 1)[-1].startswith("_")))


def _complete(code, pos, env):
    # cursor_pos counts code points, as Python strings do.
    before = code[:pos]
    line = before.rsplit("\n", 1)[-1]
    m = _IMPORT.match(line)
    if m:
        word = m.group(1)
        return {"matches": _modules(word), "cursor_start": pos - len(word), "cursor_end": pos}
    word = _NAME.search(line).group(0)
    completer = rlcompleter.Completer(env)
    matches, state = [], 0
    while state < 1000:
        try:
            c = completer.complete(word, state)
        except Exception:
            break
        if c is None:
            break
        c = c.rstrip("(")
        if c not in matches:
            matches.append(c)
        state += 1
    return {"matches": matches, "cursor_start": pos - len(word), "cursor_end": pos}


def _inspect(code, pos, env, detail):
    before, after = code[:pos], code[pos:]
    name = _NAME.search(before).group(0) + re.match(r"[\w]*", after).group(0)
    name = name.strip(".")
    if not name:
        return {"found": False}
    try:
        obj = eval(name, env)  # a dotted name only: no calls
    except Exception:
        return {"found": False}
    parts = []
    try:
        parts.append("Signature: %s%s" % (name, inspect.signature(obj)))
    except (TypeError, ValueError):
        pass
    if detail and not inspect.isbuiltin(obj):
        try:
            parts.append("Source:\n" + inspect.getsource(obj))
        except (OSError, TypeError):
            pass
    doc = inspect.getdoc(obj)
    if doc:
        parts.append("Docstring:\n" + doc)
    parts.append("Type: " + type(obj).__name__)
    return {"found": True, "text": "\n".join(parts)}


def _ask(cmd, env):
    kind = cmd["type"]
    try:
        if kind == "complete":
            reply = _complete(cmd["code"], cmd.get("cursor_pos", 0), env)
        else:
            reply = _inspect(cmd["code"], cmd.get("cursor_pos", 0), env, cmd.get("detail_level", 0))
    except Exception:
        reply = {"matches": [], "cursor_start": cmd.get("cursor_pos", 0), "cursor_end": cmd.get("cursor_pos", 0), "found": False}
    reply["type"] = kind + "_reply"
    reply["id"] = cmd["id"]
    return reply


def _flush():
    for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            f.flush()
        except BaseException:
            pass


def main():
    signal.signal(signal.SIGINT, _on_sigint)
    for fd in (3, 4):  # child processes must not hold the protocol pipes
        os.set_inheritable(fd, False)
    commands = os.fdopen(3, "rb")
    control = os.fdopen(4, "wb", buffering=0)
    # User code gets a module of its own as __main__ (pickle and
    # "import __main__" find its names there, not the driver's).
    user = types.ModuleType("__main__")
    user.__builtins__ = __builtins__
    sys.modules["__main__"] = user
    env = user.__dict__
    sys.argv = [""]

    def send(obj):
        control.write(json.dumps(obj).encode() + b"\n")

    send({"type": "ready", "version": platform.python_version()})
    for line in commands:
        if not line.strip():
            continue
        cmd = json.loads(line)
        if cmd.get("type") in ("complete", "inspect"):
            send(_ask(cmd, env))
            continue
        reply = _execute(cmd["code"], env)
        if cmd.get("silent"):
            reply.pop("result", None)
        _flush()
        marker = ("\0aiod:end:" + cmd["token"] + "\0").encode()
        os.write(1, marker)
        os.write(2, marker)
        reply["type"] = "done"
        send(reply)


main()
