// Package replbridge runs native REPL processes (a plain python3 or node,
// no ipykernel) and makes them speak the same Jupyter-shaped messages a
// kernel would, so that stream/ and gateway/ need not care which runtime
// ran the code.
//
// Each REPL is one interpreter process in its own process group, running a
// small driver program embedded in this package (driver/py_driver.py,
// driver/node_driver.js). The driver and Go talk over four pipes:
//
//	fd 3 (Go -> driver): one JSON command per line: {"code","token","silent"}.
//	fd 4 (driver -> Go): JSON lines: {"type":"ready","version"} once, then
//	                     one {"type":"done","status","result","error"} per command.
//	fd 1, fd 2:          the real stdout and stderr, read raw by one Go reader
//	                     each and turned into iopub stream messages live.
//
// At the end of a command the driver flushes, writes the end marker
// "\x00aiod:end:<token>\x00" (token: random, chosen by Go per execution) to
// fd 1 and to fd 2, then sends "done". Go emits the execution's
// execute_result or error, status idle and execute_reply only after it has
// seen the marker on both pipes and the done line, so every byte the code
// printed, including output of child processes writing to fd 1/2 directly,
// is delivered before idle. The marker is stripped from the text.
//
// Stdin of the process is /dev/null: code that reads stdin gets EOF.
//
// Interrupt sends SIGINT to the process group. Python raises
// KeyboardInterrupt in the running code; Node stops a synchronous run
// (vm breakOnSigint) or abandons the awaited promise of a top-level-await
// cell. A synchronous loop that runs after an await (inside a promise
// callback) cannot be interrupted: the caller's restart path handles it.
//
// JavaScript top-level await uses Node's own REPL transform, reached with
// --expose-internals; without it such a cell runs in an async function and
// its declarations and value do not persist.
package replbridge
