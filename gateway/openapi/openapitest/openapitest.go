// Package openapitest checks answers against aiod's OpenAPI document with
// kin-openapi's validator (openapi3filter). Only tests import it, so the
// daemon does not link the validator.
package openapitest

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/aiod/aiod/gateway/openapi"
)

// Doc is the loaded and validated document with its router.
type Doc struct {
	T      *openapi3.T
	router routers.Router
}

var load = sync.OnceValues(func() (*Doc, error) {
	loader := openapi3.NewLoader()
	t, err := loader.LoadFromData(openapi.Document(openapi.DocVersion))
	if err != nil {
		return nil, fmt.Errorf("load openapi.json: %w", err)
	}
	if err := t.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapi.json is not a valid OpenAPI document: %w", err)
	}
	r, err := gorillamux.NewRouter(t)
	if err != nil {
		return nil, fmt.Errorf("route openapi.json: %w", err)
	}
	return &Doc{T: t, router: r}, nil
})

// Load returns the document, loaded once per test binary.
func Load() (*Doc, error) { return load() }

// Has reports whether the document describes method on the router pattern
// path (fasthttp/router's syntax, which is OpenAPI's for {name}).
func (d *Doc) Has(method, path string) bool {
	pi := d.T.Paths.Find(path)
	return pi != nil && pi.GetOperation(strings.ToUpper(method)) != nil
}

// Check validates one answer: the route must be in the document, the
// status among its responses (or its default), and a JSON body must match
// the response's schema. The statuses of the answers that pass are
// recorded per route (Statuses). Bodies of other types (files, HTML, metrics, SSE)
// are checked for their status and content type only.
func (d *Doc) Check(req *http.Request, status int, header http.Header, body []byte) error {
	r := req.Clone(context.Background())
	r.Body = http.NoBody // requests are not validated: the tests send bad ones on purpose
	route, params, err := d.router.FindRoute(r)
	if err != nil {
		if status == http.StatusNotFound || status == http.StatusMethodNotAllowed {
			// No route: the router's own answer, the error envelope.
			return d.checkSchema("ErrorEnvelope", body)
		}
		return fmt.Errorf("%s %s is not in openapi.json: %w", req.Method, req.URL.Path, err)
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true,
		AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}
	ct, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
	if len(body) == 0 || (ct != "application/json" && !strings.HasSuffix(ct, "+json")) {
		opts.ExcludeResponseBody = true
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: opts},
		Status:                 status,
		Header:                 header,
		Options:                opts,
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s answered %d, which openapi.json does not allow: %w", req.Method, req.URL.Path, status, err)
	}
	// An answer that passed (a refused one already fails its test) counts
	// for the status report.
	seen.add(req.Method+" "+route.Path, status, route.Operation.Responses.Status(status) != nil)
	return nil
}

// checkSchema validates a JSON body against a component schema.
func (d *Doc) checkSchema(name string, body []byte) error {
	ref := d.T.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("openapi.json has no schema %s", name)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("body is not JSON (%v): %q", err, body)
	}
	if err := ref.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors()); err != nil {
		return fmt.Errorf("body does not match %s: %w", name, err)
	}
	return nil
}

// CheckBody validates body as the JSON answer with status of method path
// (a request built for the check, for schema tests).
func (d *Doc) CheckBody(method, path string, status int, body []byte) error {
	req, err := http.NewRequest(method, "http://127.0.0.1"+path, nil)
	if err != nil {
		return err
	}
	return d.Check(req, status, http.Header{"Content-Type": {"application/json"}}, body)
}

// statuses records, per documented route, the statuses of the answers
// Check saw, and whether the route declares each one itself (not only
// through its default response).
type statuses struct {
	mu sync.Mutex
	m  map[string]map[int]bool // "GET /path" -> status -> declared
}

var seen = &statuses{m: map[string]map[int]bool{}}

func (s *statuses) add(route string, status int, declared bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[route] == nil {
		s.m[route] = map[int]bool{}
	}
	s.m[route][status] = declared
}

// Statuses lists, one line per route the checked answers came from, the
// statuses they had, an undeclared one marked with "!" (the route answers
// it, but its operation names it only through default), and the number of
// undeclared statuses.
func Statuses() (report string, undeclared int) {
	seen.mu.Lock()
	defer seen.mu.Unlock()
	routes := make([]string, 0, len(seen.m))
	for r := range seen.m {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	var b strings.Builder
	for _, r := range routes {
		codes := make([]int, 0, len(seen.m[r]))
		for c := range seen.m[r] {
			codes = append(codes, c)
		}
		sort.Ints(codes)
		b.WriteString(r + ":")
		for _, c := range codes {
			b.WriteString(" " + strconv.Itoa(c))
			if !seen.m[r][c] {
				b.WriteString("!")
				undeclared++
			}
		}
		b.WriteString("\n")
	}
	return b.String(), undeclared
}
