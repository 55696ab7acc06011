package backend

import (
	"context"
	"errors"

	"github.com/aiod/aiod/replbridge/term"
	"github.com/aiod/aiod/stream/backend/isolate"
)

// TerminalWant says what terminal to start.
type TerminalWant struct {
	Tenant     string // whose sandbox it runs in, under --isolation tenant
	Cwd        string // where the shell starts; "" is the runtimes' working folder
	Env        []string
	Rows, Cols uint16
}

// Terminal is a shell on a pseudo-terminal, under the same user, limits
// and tenant sandbox as every local runtime.
type Terminal struct {
	*term.Term
	limits *isolate.Limits
}

// Close ends the shell and releases its limits.
func (t *Terminal) Close(ctx context.Context) error {
	return errors.Join(t.Term.Close(ctx), t.limits.Close())
}

// StartTerminal starts a shell on a pseudo-terminal for w.
func (r *Runtimes) StartTerminal(w TerminalWant) (*Terminal, error) {
	tn, held, err := r.tenantFor(w.Tenant)
	if err != nil {
		return nil, &ErrNoInterpreter{err.Error()}
	}
	defer held()
	cwd := w.Cwd
	if cwd == "" {
		cwd = r.cfg.Workdir
	}
	p := &placement{r: r, t: tn}
	tm, err := term.Start(term.Options{Cwd: cwd, Environ: r.base, Env: w.Env, Credential: r.iso.Credential(),
		Wrap: wrapTerminal(tn), Admit: p.admit(), Rows: w.Rows, Cols: w.Cols})
	if err != nil {
		p.failed()
		return nil, workdirProblem(cwd, tn, err)
	}
	return &Terminal{Term: tm, limits: p.l}, nil
}
