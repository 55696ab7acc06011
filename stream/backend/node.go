package backend

import (
	"context"
	"fmt"
	"time"

	"github.com/aiod/aiod/kernel/jupyter"
	"github.com/aiod/aiod/replbridge"
	"github.com/aiod/aiod/stream/backend/isolate"
	"github.com/aiod/aiod/stream/execution"
)

// RunNode runs code in a node process of its own, in dir, with stdin as its
// standard input: the one-shot path for calls that send stdin (a REPL
// session's standard input is /dev/null). budget is the output budget; each
// stream keeps half of it. The result holds a stdout and a stderr stream
// output; exit is the process's, 124 on timeout. started, when set, is
// called once the process runs under its limits (the caller's start slot,
// Registry.AdmitProcess, can go back then). tenant is the caller's: under
// tenant isolation the process runs in its sandbox, and dir is a folder of
// its view.
func (r *Runtimes) RunNode(ctx context.Context, code, stdin, dir string, timeout time.Duration, budget int, started func(), tenant string) (res *execution.Result, exit int) {
	one := 1
	res = &execution.Result{ID: jupyter.NewID(), Code: code, Language: JS, ExecutionCount: &one}
	if r.env.Node.Error != "" {
		return failed(res, r.env.Node.Error)
	}
	t, held, err := r.tenantFor(tenant)
	if err != nil {
		return failed(res, err.Error())
	}
	defer held()
	var l *isolate.Limits
	out, err := replbridge.RunNode(ctx, replbridge.NodeRun{
		Node: r.env.Node.Path, Code: code, Stdin: stdin, Dir: dir, Timeout: timeout, Limit: max(budget/2, 1024),
		Environ: r.base, Credential: r.iso.Credential(), Wrap: wrapIn(t), Started: func(pid int) (err error) {
			l, err = r.iso.Apply(pid, t)
			if err == nil && started != nil {
				started()
			}
			return err
		},
	})
	defer l.Close() //nolint:errcheck // the process group is gone; this removes its cgroup
	if err != nil {
		return failed(res, err.Error())
	}
	if out.Canceled {
		res.Notes = append(res.Notes, "the request ended before the code finished; the process was killed")
	}
	for _, s := range []struct {
		name, text string
		cut        int
	}{{"stdout", out.Stdout, out.StdoutCut}, {"stderr", out.Stderr, out.StderrCut}} {
		if s.text != "" {
			res.Outputs = append(res.Outputs, &execution.Output{Type: jupyter.MsgStream, Name: s.name, Text: s.text, Truncated: s.cut > 0})
		}
		if s.cut > 0 {
			res.Truncated = true
			res.Notes = append(res.Notes, fmt.Sprintf("%s was cut after %d bytes (%d bytes dropped)", s.name, len(s.text), s.cut))
		}
	}
	switch {
	case out.TimedOut:
		res.Status = execution.StatusTimeout
		res.Notes = append([]string{fmt.Sprintf("execution timed out after %s and the process was killed", timeout)}, res.Notes...)
		return res, 124
	case out.ExitCode == 0:
		res.Status = execution.StatusOK
		return res, 0
	}
	res.Status = execution.StatusError
	if out.Signal != "" {
		res.Notes = append([]string{fmt.Sprintf("node was killed by signal %s", out.Signal)}, res.Notes...)
		return res, out.ExitCode
	}
	exit = out.ExitCode
	if exit < 0 {
		exit = 1
	}
	res.Notes = append([]string{fmt.Sprintf("node exited with code %d", exit)}, res.Notes...)
	return res, exit
}

func failed(res *execution.Result, msg string) (*execution.Result, int) {
	res.Status = execution.StatusError
	res.Notes = append(res.Notes, msg)
	return res, 1
}
