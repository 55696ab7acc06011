package docs

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, seen from this package's folder.
const root = ".."

// pages are the Markdown files whose links are checked: README.md and every
// .md file under docs/.
func pages(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// link is one link of a page, where it stands.
type link struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	heading    = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	mdLink     = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
)

// lines calls f with each line of a Markdown text that is not inside a
// fenced code block, and its number.
func lines(text string, f func(n int, line string)) {
	fence := ""
	for i, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		case strings.HasPrefix(trimmed, "```"), strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
			continue
		}
		f(i+1, l)
	}
}

// links returns the links of a Markdown text, leaving out code blocks and
// code spans.
func links(text string) []link {
	var out []link
	lines(text, func(n int, l string) {
		if m := refDef.FindStringSubmatch(l); m != nil {
			out = append(out, link{n, m[1]})
			return
		}
		l = withoutCode(l)
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			out = append(out, link{n, m[1]})
		}
	})
	return out
}

// withoutCode drops a line's code spans: a run of backticks up to the next
// run of the same length. A run without a match is kept as text.
func withoutCode(l string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(l, '`')
		if i < 0 {
			return b.String() + l
		}
		n := i
		for n < len(l) && l[n] == '`' {
			n++
		}
		fence := l[i:n]
		end := -1
		for j := n; j < len(l); {
			k := strings.Index(l[j:], fence)
			if k < 0 {
				break
			}
			k += j
			if k+len(fence) == len(l) || l[k+len(fence)] != '`' {
				end = k
				break
			}
			for j = k; j < len(l) && l[j] == '`'; j++ {
			}
		}
		if end < 0 {
			b.WriteString(l[:n])
			l = l[n:]
			continue
		}
		b.WriteString(l[:i])
		l = l[end+len(fence):]
	}
}

// slug is the anchor GitHub gives a heading: the heading's text as it is
// rendered (no code marks, link targets, emphasis or HTML), in lower case,
// with every character but letters, digits, spaces, hyphens and
// underscores dropped, and spaces turned into hyphens.
func slug(h string) string {
	h = mdLink.ReplaceAllString(h, "$1")
	h = htmlTag.ReplaceAllString(h, "")
	h = strings.NewReplacer("`", "", "*", "").Replace(h)
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown text's headings; a repeated
// heading gets -1, -2, ... as on GitHub.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	lines(text, func(_ int, l string) {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			return
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	})
	return out
}

// external reports whether a link leaves the repository (a URL with a
// scheme, or a protocol-relative one); such links are not fetched.
func external(target string) bool {
	if strings.HasPrefix(target, "//") {
		return true
	}
	u, err := url.Parse(target)
	return err == nil && u.Scheme != ""
}

// TestLinksResolve checks every relative link of README.md and docs/: the
// file or folder it names exists, and its #anchor (in the same page or in
// another Markdown file) is a heading there.
func TestLinksResolve(t *testing.T) {
	texts := map[string]string{} // Markdown files read so far, by cleaned path
	read := func(p string) (string, error) {
		if s, ok := texts[p]; ok {
			return s, nil
		}
		b, err := os.ReadFile(p)
		texts[p] = string(b)
		return string(b), err
	}
	checked := 0
	for _, page := range pages(t) {
		text, err := read(filepath.Clean(page))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(text) {
			if external(l.target) {
				continue
			}
			checked++
			where := fmt.Sprintf("%s:%d: %s", strings.TrimPrefix(page, root+"/"), l.line, l.target)
			path, frag, _ := strings.Cut(l.target, "#")
			if p, err := url.PathUnescape(path); err == nil {
				path = p
			}
			dest := filepath.Clean(page)
			if path != "" {
				dest = filepath.Join(filepath.Dir(page), path)
				if strings.HasPrefix(path, "/") {
					dest = filepath.Join(root, path)
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: no such file: %s", where, dest)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: an anchor into a file that is not Markdown", where)
				continue
			}
			target, err := read(filepath.Clean(dest))
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if !anchors(target)[frag] {
				t.Errorf("%s: no heading of %s has the anchor #%s", where, dest, frag)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d relative links found; the link parser is broken", checked)
	}
}

// TestEveryPageIsInTheREADME checks that the README's table of contents
// names every page of docs/.
func TestEveryPageIsInTheREADME(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var linked []string
	for _, l := range links(string(b)) {
		path, _, _ := strings.Cut(l.target, "#")
		linked = append(linked, filepath.Clean(path))
	}
	for _, p := range pages(t)[1:] {
		rel, _ := filepath.Rel(root, p)
		if !slices.Contains(linked, rel) {
			t.Errorf("README.md does not link %s", rel)
		}
	}
}

func TestSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"The two commands", "the-two-commands"},
		{"MCP (Model Context Protocol)", "mcp-model-context-protocol"},
		{"Live streaming: the WebSocket `GET /v2/code/ws`", "live-streaming-the-websocket-get-v2codews"},
		{"The page's libraries", "the-pages-libraries"},
		{"Kernel start: fork against spawn (`aiobench compare`, issue 14)", "kernel-start-fork-against-spawn-aiobench-compare-issue-14"},
		{"`BenchmarkPassRESTvsFloor`", "benchmarkpassrestvsfloor"},
		{"What the SDK's models need", "what-the-sdks-models-need"},
		{"A [link](x.md) and **bold**", "a-link-and-bold"},
		{"snake_case stays", "snake_case-stays"},
		{"Größe", "größe"},
	} {
		if got := slug(c.heading); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

func TestLinksAndAnchorsParse(t *testing.T) {
	text := "# Top\n\nSee [a](a.md#x), ![img](s.png \"t\") and `[not](code.md)`.\n" +
		"```\n[not](fenced.md)\n# Not a heading\n```\n" +
		"[ref]: docs/b.md\n## Top\n### Top\n"
	var got []string
	for _, l := range links(text) {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	if want := []string{"3:a.md#x", "3:s.png", "8:docs/b.md"}; !slices.Equal(got, want) {
		t.Errorf("links = %v, want %v", got, want)
	}
	a := anchors(text)
	for _, want := range []string{"top", "top-1", "top-2"} {
		if !a[want] {
			t.Errorf("anchors %v lack %q", a, want)
		}
	}
	if a["not-a-heading"] {
		t.Errorf("a line in a code block counted as a heading: %v", a)
	}
}
