package call

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/aiod/aiod/gateway/api"
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseEnv reads the optional object of environment variables in field
// name as KEY=VALUE, sorted by name. It refuses names a shell cannot
// export, values holding a NUL byte, and AIO_* names: those are aiod's
// own configuration, which it never passes to runtimes.
func ParseEnv(f *api.Fields, name string) ([]string, *api.FieldError) {
	m := f.StrMap(name)
	if err := f.Err(); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		switch {
		case !envName.MatchString(k):
			return nil, &api.FieldError{In: "body", Field: name, Type: "value_error",
				Msg: fmt.Sprintf("variable name %q is not a valid name (letters, digits and _, not first a digit)", k)}
		case strings.HasPrefix(strings.ToUpper(k), "AIO_"):
			return nil, &api.FieldError{In: "body", Field: name, Type: "value_error",
				Msg: fmt.Sprintf("variable %q: AIO_* variables are aiod's own configuration and are never passed to runtimes", k)}
		case strings.ContainsRune(m[k], 0):
			return nil, &api.FieldError{In: "body", Field: name, Type: "value_error", Msg: fmt.Sprintf("variable %q holds a NUL byte", k)}
		}
		out = append(out, k+"="+m[k])
	}
	return out, nil
}

// parseCwd reads the optional working folder in field name: absolute, or
// relative to the workspace. Whether it exists is checked when the call is
// claimed (CheckCwd), where the caller's view is known.
func (c *Core) parseCwd(f *api.Fields, name string) (string, *api.FieldError) {
	p := f.OptStr(name)
	if err := f.Err(); err != nil {
		return "", err
	}
	if p == nil || *p == "" {
		return "", nil
	}
	if strings.ContainsRune(*p, 0) {
		return "", &api.FieldError{In: "body", Field: name, Type: "value_error", Msg: "holds a NUL byte"}
	}
	dir := *p
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(c.Workspace(), dir)
	}
	return filepath.Clean(dir), nil
}

// CheckCwd answers 422 unless dir is a folder of tenant's view (under
// tenant isolation, the tenant's sandbox as its runtimes see it).
func (c *Core) CheckCwd(tenant, dir string) *Error {
	view, err := c.View(tenant)
	if err != nil {
		return &Error{Status: fasthttp.StatusServiceUnavailable, Msg: fmt.Sprintf("field 'cwd': cannot check %q: %v", dir, err)}
	}
	st, err := view.Stat(dir)
	switch {
	case err != nil:
		return &Error{Status: fasthttp.StatusUnprocessableEntity, Msg: fmt.Sprintf("field 'cwd': cannot use %q as the working directory: %v", dir, err)}
	case !st.IsDir():
		return &Error{Status: fasthttp.StatusUnprocessableEntity, Msg: fmt.Sprintf("field 'cwd': %q is not a directory", dir)}
	}
	return nil
}
