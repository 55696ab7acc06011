package fsplane

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/aiod/aiod/gateway/api"
)

// grepOpts are the validated fields of /v1/file/grep.
type grepOpts struct {
	pattern           string
	re                *regexp.Regexp
	include, exclude  []string // globs on the name, or the relative path when they hold "/"
	types             []string // globs from the ripgrep type
	before, after     int
	max, offset       int
	maxSize           int64
	multiline, recurs bool
}

// grepTypes maps the common ripgrep --type names to name globs.
var grepTypes = map[string][]string{
	"py": {"*.py", "*.pyi"}, "python": {"*.py", "*.pyi"},
	"js": {"*.js", "*.mjs", "*.cjs", "*.jsx"}, "ts": {"*.ts", "*.tsx", "*.mts", "*.cts"},
	"go": {"*.go"}, "rust": {"*.rs"}, "java": {"*.java"}, "c": {"*.c", "*.h"},
	"cpp": {"*.cpp", "*.cc", "*.cxx", "*.hpp", "*.hh", "*.h"}, "rb": {"*.rb"}, "ruby": {"*.rb"},
	"md": {"*.md", "*.markdown"}, "markdown": {"*.md", "*.markdown"},
	"json": {"*.json"}, "yaml": {"*.yaml", "*.yml"}, "toml": {"*.toml"},
	"html": {"*.html", "*.htm"}, "css": {"*.css", "*.scss"}, "sh": {"*.sh", "*.bash", "*.zsh"},
	"txt": {"*.txt"}, "csv": {"*.csv"}, "sql": {"*.sql"}, "xml": {"*.xml"},
}

func readGrepOpts(f *api.Fields) (grepOpts, *api.FieldError) {
	o := grepOpts{
		pattern: f.Str("pattern", true),
		include: f.StrList("include"), exclude: f.StrList("exclude"),
		multiline: f.Bool("multiline", false), recurs: f.Bool("recursive", true),
		max: 500, maxSize: 1 << 20,
	}
	ci, fixed := f.Bool("case_insensitive", false), f.Bool("fixed_strings", false)
	typ, size := f.Str("type", false), f.Str("max_file_size", false)
	var e1, e2, e3, e4 *api.FieldError
	o.before, e1 = intIn(f, "context_before", 0, 0, 20)
	o.after, e2 = intIn(f, "context_after", 0, 0, 20)
	o.max, e3 = intIn(f, "max_results", 500, 1, 10_000)
	o.offset, e4 = intIn(f, "offset", 0, 0, 1<<31-1)
	fe := firstErr(f.Err(), e1, e2, e3, e4)
	if fe != nil {
		return o, fe
	}
	if fe := o.compile(ci, fixed); fe != nil {
		return o, fe
	}
	if fe := o.setType(typ); fe != nil {
		return o, fe
	}
	if fe := checkPatterns("include", o.include); fe != nil {
		return o, fe
	}
	if fe := checkPatterns("exclude", o.exclude); fe != nil {
		return o, fe
	}
	if size != "" {
		n, err := api.ParseSize(size)
		if err != nil {
			return o, badField("max_file_size", "must look like 500K, 1M or 2G, got "+quote(size))
		}
		o.maxSize = min(n, maxRead) // nothing bigger is ever held in memory
	}
	return o, nil
}

func (o *grepOpts) compile(ci, fixed bool) *api.FieldError {
	if o.pattern == "" {
		return badField("pattern", "must not be empty")
	}
	expr := o.pattern
	if fixed {
		expr = regexp.QuoteMeta(expr)
	}
	if ci {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return badField("pattern", "is not a valid RE2 regular expression: "+err.Error())
	}
	o.re = re
	return nil
}

func (o *grepOpts) setType(typ string) *api.FieldError {
	if typ == "" {
		return nil
	}
	globs, ok := grepTypes[strings.ToLower(typ)]
	if !ok {
		return badField("type", "unknown file type "+quote(typ)+"; known: py, js, ts, go, rust, java, c, cpp, rb, md, json, yaml, toml, html, css, sh, txt, csv, sql, xml")
	}
	o.types = globs
	return nil
}

// checkPatterns validates a list field of globs.
func checkPatterns(field string, globs []string) *api.FieldError {
	for _, g := range globs {
		if err := checkPattern(g); err != nil {
			return badField(field, quote(g)+" "+err.Error())
		}
	}
	return nil
}

// intIn reads an optional integer field and checks lo <= v <= hi.
func intIn(f *api.Fields, name string, def, lo, hi int64) (int, *api.FieldError) {
	v, ok := f.Int(name)
	if !ok {
		return int(def), nil
	}
	if v < lo || v > hi {
		return int(def), badField(name, "must be between "+strconv.FormatInt(lo, 10)+" and "+strconv.FormatInt(hi, 10))
	}
	return int(v), nil
}

// firstErr is the first non-nil error.
func firstErr(errs ...*api.FieldError) *api.FieldError {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
