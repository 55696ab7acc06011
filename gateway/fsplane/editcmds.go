package fsplane

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// Lines of context around an edit in the snippet the editor prints, and the
// most entries a folder view prints.
const (
	snippetLines   = 4
	maxViewEntries = 10_000
)

// view prints a file cat -n style (view_range is 1-based, inclusive, end -1
// for the last line) or a folder two levels deep, hidden entries left out.
func (s *server) view(r editReq, res *editorResult) error {
	fi, err := r.fsys.Stat(r.path)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		if r.viewRange != nil {
			res.fail("view_range is not allowed when path is a directory")
			return nil
		}
		return viewDir(r.fsys, r.path, res)
	}
	content, err := readText(r.fsys, r.path)
	if err != nil {
		return err
	}
	lines := textLines(content)
	first, last := 1, len(lines)
	if r.viewRange != nil {
		a, b := int(r.viewRange[0]), int(r.viewRange[1])
		if b == -1 {
			b = len(lines)
		}
		if a < 1 || a > max(len(lines), 1) || b < a || b > len(lines) {
			res.fail(fmt.Sprintf("Invalid view_range %v: the file has %d lines; start must be 1..%d and end start..%d or -1",
				r.viewRange, len(lines), max(len(lines), 1), len(lines)))
			return nil
		}
		first, last = a, b
	}
	res.Output = "Here's the result of running `cat -n` on " + r.path + ":\n" + numbered(lines[first-1:last], first)
	return nil
}

func viewDir(fsys FS, dir string, res *editorResult) error {
	var b strings.Builder
	b.WriteString("Here's the files and directories up to 2 levels deep in " + dir + ", excluding hidden items:\n" + dir + "\n")
	n := 0
	err := walkTree(fsys, dir, false, 2, func(rel string, _ fs.DirEntry) error {
		if n++; n > maxViewEntries {
			return errWalkLimit
		}
		b.WriteString(dir + "/" + rel + "\n")
		return nil
	})
	if err != nil && !errors.Is(err, errWalkLimit) {
		return err
	}
	res.Output = strings.ReplaceAll(b.String(), "//", "/")
	return nil
}

// create writes a new file. An existing file is already_exists: overwrite
// with /v1/file/write, or edit with str_replace.
func (s *server) create(r editReq, res *editorResult) error {
	if fi, err := r.fsys.Stat(r.path); err == nil {
		if fi.IsDir() {
			return errIsDir()
		}
		return errExists()
	}
	if _, err := writeFile(r.fsys, r.path, []byte(*r.fileText), false); err != nil {
		return err
	}
	s.history.push(r.key(), nil, false)
	res.Output = "File created successfully at: " + r.path
	res.NewContent = r.fileText
	return nil
}

// strReplace replaces old_str, which must occur exactly once unless
// replace_mode is ALL, FIRST or LAST.
func (s *server) strReplace(r editReq, res *editorResult) error {
	content, err := readText(r.fsys, r.path)
	if err != nil {
		return err
	}
	oldS, newS := *r.oldStr, deref(r.newStr)
	n := strings.Count(content, oldS)
	switch {
	case oldS == "":
		res.fail("old_str must not be empty")
		return nil
	case n == 0:
		res.fail("No replacement was performed, old_str `" + oldS + "` did not appear verbatim in " + r.path + ".")
		return nil
	case n > 1 && r.mode == "":
		res.fail(fmt.Sprintf("No replacement was performed. Multiple occurrences of old_str `%s` in lines %v. "+
			"Make it unique, or set replace_mode to ALL, FIRST or LAST.", oldS, occurrenceLines(content, oldS)))
		return nil
	}
	idx := strings.Index(content, oldS)
	var updated string
	switch r.mode {
	case "ALL":
		updated = strings.ReplaceAll(content, oldS, newS)
	case "LAST":
		idx = strings.LastIndex(content, oldS)
		fallthrough
	default:
		updated = content[:idx] + newS + content[idx+len(oldS):]
	}
	if err := s.commit(r, content, updated, res); err != nil {
		return err
	}
	line := strings.Count(content[:idx], "\n")
	res.Output = "The file " + r.path + " has been edited. " + snippet(r.path, updated, line, strings.Count(newS, "\n")+1) +
		"Review the changes and make sure they are as expected. Edit the file again if necessary."
	return nil
}

// insert puts new_str after line insert_line (0 means at the top).
func (s *server) insert(r editReq, res *editorResult) error {
	content, err := readText(r.fsys, r.path)
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(content, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	k := int(r.insertLine)
	if k < 0 || k > len(lines) {
		res.fail(fmt.Sprintf("Invalid insert_line parameter: %d. It should be within the range of lines of the file: [0, %d]", k, len(lines)))
		return nil
	}
	before := strings.Join(lines[:k], "")
	if before != "" && !strings.HasSuffix(before, "\n") {
		before += "\n"
	}
	text := *r.newStr
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	updated := before + text + strings.Join(lines[k:], "")
	if err := s.commit(r, content, updated, res); err != nil {
		return err
	}
	res.Output = "The file " + r.path + " has been edited. " + snippet(r.path, updated, k, strings.Count(text, "\n")) +
		"Review the changes (correct indentation, no duplicate lines). Edit the file again if necessary."
	return nil
}

// undo restores the content before the last editor change of path.
func (s *server) undo(r editReq, res *editorResult) error {
	snap, ok := s.history.pop(r.key())
	if !ok {
		res.fail("No edit history found for " + r.path + ".")
		return nil
	}
	cur, _ := readAll(r.fsys, r.path, maxRead)
	curS := string(cur)
	res.OldContent = &curS
	if !snap.existed {
		if err := r.fsys.Remove(r.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.history.push(r.key(), snap.content, snap.existed)
			return err
		}
		res.Output = "Last edit to " + r.path + " undone successfully: the file it created was removed."
		return nil
	}
	if err := writeAll(r.fsys, r.path, snap.content); err != nil {
		s.history.push(r.key(), snap.content, snap.existed)
		return err
	}
	restored := string(snap.content)
	res.NewContent = &restored
	res.Output = "Last edit to " + r.path + " undone successfully. Here's the result of running `cat -n` on " +
		r.path + ":\n" + numbered(textLines(restored), 1)
	return nil
}

// commit writes an edit and records the old content for undo.
func (s *server) commit(r editReq, old, updated string, res *editorResult) error {
	if err := writeAll(r.fsys, r.path, []byte(updated)); err != nil {
		return err
	}
	s.history.push(r.key(), []byte(old), true)
	res.OldContent, res.NewContent = &old, &updated
	return nil
}

// readText reads a whole file as UTF-8 text within maxRead.
func readText(fsys FS, path string) (string, error) {
	b, err := readAll(fsys, path, maxRead)
	if err == nil {
		err = checkUTF8(path, b)
	}
	return string(b), err
}

// textLines splits text into lines without their "\n"; "" has none.
func textLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// numbered renders lines like cat -n, the first numbered from.
func numbered(lines []string, from int) string {
	var b strings.Builder
	for i, l := range lines {
		fmt.Fprintf(&b, "%6d\t%s\n", from+i, l)
	}
	return b.String()
}

// snippet shows the edited lines [line, line+count) with context.
func snippet(path, content string, line, count int) string {
	lines := textLines(content)
	start := max(0, line-snippetLines)
	end := min(len(lines), line+count+snippetLines)
	if start > end {
		start = end
	}
	return "Here's the result of running `cat -n` on a snippet of " + path + ":\n" + numbered(lines[start:end], start+1)
}

// occurrenceLines lists the 1-based lines where sub starts.
func occurrenceLines(s, sub string) []int {
	var out []int
	for off := 0; ; {
		i := strings.Index(s[off:], sub)
		if i < 0 || len(out) == 20 {
			return out
		}
		out = append(out, strings.Count(s[:off+i], "\n")+1)
		off += i + len(sub)
	}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
