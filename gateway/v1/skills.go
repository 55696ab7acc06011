package v1

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/valyala/fasthttp"
	"go.yaml.in/yaml/v3"

	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/gateway/call"
	"github.com/aiod/aiod/gateway/fsplane/fsview"
)

// Skills (the reference's /v1/skills): instruction-and-script packages, a
// folder holding SKILL.md (YAML front matter, then Markdown), registered
// from a folder of the caller's view or from a zip extracted there, and
// listed for an agent. The files stay where they are, in the tenant's
// view, read and written as the tenant (the file plane's view); aiod keeps
// only each tenant's registry (name, folder, front matter) in the state
// directory (skills.json). Deleting a skill unregisters it and leaves its
// files.

const (
	skillsFile     = "skills.json"
	skillFileName  = "SKILL.md"
	maxSkills      = 64       // a tenant's
	maxSkillMD     = 1 << 20  // bytes of one SKILL.md
	maxZipBytes    = 64 << 20 // bytes a zip may extract to
	maxZipEntries  = 4096
	skillsFormPath = "path"
)

// skillMeta is SkillMetadata.
type skillMeta struct {
	Name         string         `json:"name"`
	Path         string         `json:"path"`
	Metadata     map[string]any `json:"metadata"`
	Dependencies []any          `json:"dependency_commands"`
}

// skills is every tenant's skills, kept in skillsFile.
type skills struct{ tenantStore[skillMeta] }

func loadSkills(stateDir string) *skills {
	k := &skills{}
	k.load(stateDir, skillsFile)
	return k
}

// of is tenant's skills by name, those named in names only when it is not
// empty.
func (k *skills) of(tenant string, names map[string]bool) []skillMeta {
	k.mu.Lock()
	defer k.mu.Unlock()
	list := []skillMeta{}
	for n, s := range k.byTenant[tenant] {
		if len(names) == 0 || names[n] {
			list = append(list, s)
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list
}

// POST /v1/skills/register (multipart: path, and file (a zip) and name)
func (v *Surface) registerSkills(ctx *fasthttp.RequestCtx) {
	form, err := ctx.MultipartForm() // the body is in memory already, within --max-body
	if err != nil {
		api.InvalidV1(ctx, bodyErr(skillsFormPath, "missing", "a multipart/form-data body with a 'path' part is required: %v", err))
		return
	}
	field := func(n string) string {
		if vs := form.Value[n]; len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
	dir, name := field(skillsFormPath), field("name")
	switch {
	case dir == "":
		api.InvalidV1(ctx, bodyErr(skillsFormPath, "missing", "Field required: the skill's folder, or where the zip goes"))
		return
	case !filepath.IsAbs(dir):
		dir = filepath.Join(v.defaultCwd(), dir)
	}
	dir = filepath.Clean(dir)
	if name != "" && !hookName.MatchString(name) {
		api.InvalidV1(ctx, bodyErr("name", "string_pattern_mismatch", "must be 1 to 64 of a-z, A-Z, 0-9, _ and -, got %q", name))
		return
	}
	view, err := v.core.ViewOf(ctx)
	if err != nil {
		api.Fail(ctx, fasthttp.StatusServiceUnavailable, "the caller's files: "+err.Error())
		return
	}
	var dirs []string
	if fhs := form.File["file"]; len(fhs) > 0 {
		dirs, err = extractSkills(view, fhs[0], dir, name)
	} else {
		dirs, err = findSkills(view, dir)
	}
	if err != nil {
		api.InvalidV1(ctx, bodyErr(skillsFormPath, "value_error", "%v", err))
		return
	}
	var found []skillMeta
	for _, d := range dirs {
		s, err := readSkill(view, d, name, len(dirs) == 1)
		if err != nil {
			api.InvalidV1(ctx, bodyErr(skillsFormPath, "value_error", "%v", err))
			return
		}
		found = append(found, s)
	}
	tenant := call.Tenant(ctx)
	k := v.skills
	k.mu.Lock()
	mine := k.byTenant[tenant]
	if mine == nil {
		mine = map[string]skillMeta{}
	}
	n := len(mine)
	for _, s := range found {
		if _, again := mine[s.Name]; !again {
			n++
		}
	}
	if n > maxSkills {
		k.mu.Unlock()
		api.Fail(ctx, fasthttp.StatusConflict, fmt.Sprintf("at most %d skills a tenant: delete some (DELETE /v1/skills/{name})", maxSkills))
		return
	}
	for _, s := range found {
		mine[s.Name] = s
	}
	k.byTenant[tenant] = mine
	err = k.saveLocked()
	k.mu.Unlock()
	if err != nil {
		api.Fail(ctx, fasthttp.StatusInternalServerError, "keep the skills in the state directory: "+err.Error())
		return
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: fmt.Sprintf("%d skills registered", len(found)),
		Data: map[string]any{"count": len(found), "registered": found}})
}

// findSkills is dir, when it holds a SKILL.md, else its folders that do.
func findSkills(view fsview.FS, dir string) ([]string, error) {
	if _, err := view.Stat(path.Join(dir, skillFileName)); err == nil {
		return []string{dir}, nil
	}
	ents, err := view.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	var dirs []string
	for _, e := range ents {
		if e.IsDir() {
			if _, err := view.Stat(path.Join(dir, e.Name(), skillFileName)); err == nil {
				dirs = append(dirs, path.Join(dir, e.Name()))
			}
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no %s in %s nor in its folders", skillFileName, dir)
	}
	return dirs, nil
}

// readSkill reads the skill in dir: its name is the front matter's, else
// name (for a single skill), else the folder's.
func readSkill(view fsview.FS, dir, name string, single bool) (skillMeta, error) {
	meta, _, err := readSkillFile(view, dir)
	if err != nil {
		return skillMeta{}, err
	}
	s := skillMeta{Path: dir, Metadata: meta, Dependencies: []any{}}
	switch n, _ := meta["name"].(string); {
	case n != "":
		s.Name = n
	case name != "" && single:
		s.Name = name
	default:
		s.Name = path.Base(dir)
	}
	if !hookName.MatchString(s.Name) {
		return skillMeta{}, fmt.Errorf("skill name %q (in %s) must be 1 to 64 of a-z, A-Z, 0-9, _ and -", s.Name, dir)
	}
	return s, nil
}

// readSkillFile reads dir's SKILL.md: its front matter and its content
// without it.
func readSkillFile(view fsview.FS, dir string) (map[string]any, string, error) {
	p := path.Join(dir, skillFileName)
	f, err := view.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, "", fmt.Errorf("open %s: %w", p, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, "", fmt.Errorf("%s is not a regular file", p)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSkillMD+1))
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", p, err)
	}
	if len(b) > maxSkillMD {
		return nil, "", fmt.Errorf("%s is over %d bytes", p, maxSkillMD)
	}
	meta, body := map[string]any{}, string(b)
	if front, after, ok := frontMatter(strings.ReplaceAll(body, "\r\n", "\n")); ok {
		if err := yaml.Unmarshal([]byte(front), &meta); err != nil {
			return nil, "", fmt.Errorf("%s: its front matter is not YAML: %v", p, err)
		}
		if meta == nil {
			meta = map[string]any{}
		}
		body = after
	}
	return meta, body, nil
}

// frontMatter splits text that opens with a "---" line into what lies
// before the next "---" line and what follows it.
func frontMatter(text string) (front, after string, ok bool) {
	rest, ok := strings.CutPrefix(text, "---\n")
	if !ok {
		return "", text, false
	}
	if r, ok := strings.CutPrefix(rest, "---"); ok && (r == "" || r[0] == '\n') {
		return "", strings.TrimPrefix(r, "\n"), true
	}
	if i := strings.Index(rest, "\n---\n"); i >= 0 {
		return rest[:i], rest[i+5:], true
	}
	if f, ok := strings.CutSuffix(rest, "\n---"); ok {
		return f, "", true
	}
	return "", text, false
}

// extractSkills extracts the zip fh into dir (into dir/name when its
// SKILL.md is at the zip's root) through the caller's view, refusing
// entries that would land outside, links, and more than maxZipEntries or
// maxZipBytes; it returns the folders of the skills it brought.
func extractSkills(view fsview.FS, fh *multipart.FileHeader, dir, name string) ([]string, error) {
	src, err := fh.Open()
	if err != nil {
		return nil, err
	}
	defer src.Close()
	data, err := io.ReadAll(io.LimitReader(src, maxZipBytes+1))
	if err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, fmt.Errorf("the file is not a zip archive: %v", err)
	}
	if len(zr.File) > maxZipEntries {
		return nil, fmt.Errorf("the zip holds %d entries; at most %d", len(zr.File), maxZipEntries)
	}
	root := false
	for _, zf := range zr.File {
		if path.Clean(zf.Name) == skillFileName {
			root = true
		}
	}
	dest := dir
	if root {
		if name == "" {
			return nil, fmt.Errorf("the zip has %s at its root: give the skill a name (field name) to extract it into %s/NAME", skillFileName, dir)
		}
		dest = path.Join(dir, name)
	}
	tops, total := map[string]bool{}, int64(0)
	for _, zf := range zr.File {
		rel := path.Clean(strings.ReplaceAll(zf.Name, "\\", "/"))
		if rel == "." || path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, fmt.Errorf("zip entry %q would land outside %s", zf.Name, dest)
		}
		mode := zf.Mode()
		target := path.Join(dest, rel)
		switch {
		case mode.IsDir():
			if err := view.MkdirAll(target, 0o755); err != nil {
				return nil, err
			}
			continue
		case !mode.IsRegular():
			return nil, fmt.Errorf("zip entry %q is not a file or a folder (%s): links and devices are not extracted", zf.Name, mode.Type())
		}
		if total += int64(zf.UncompressedSize64); total > maxZipBytes {
			return nil, fmt.Errorf("the zip extracts to more than %d bytes", maxZipBytes)
		}
		if err := extractOne(view, zf, target); err != nil {
			return nil, err
		}
		if top, _, _ := strings.Cut(rel, "/"); top != rel {
			tops[top] = true
		}
	}
	if root {
		return []string{dest}, nil
	}
	var dirs []string
	for top := range tops {
		if _, err := view.Stat(path.Join(dest, top, skillFileName)); err == nil {
			dirs = append(dirs, path.Join(dest, top))
		}
	}
	sort.Strings(dirs)
	if len(dirs) == 0 {
		return nil, fmt.Errorf("the zip holds no %s, at its root or in its folders", skillFileName)
	}
	return dirs, nil
}

// extractOne writes zip entry zf at target (its folders made), as the
// caller, never through a link.
func extractOne(view fsview.FS, zf *zip.File, target string) error {
	if err := view.MkdirAll(path.Dir(target), 0o755); err != nil {
		return err
	}
	r, err := zf.Open()
	if err != nil {
		return fmt.Errorf("zip entry %q: %w", zf.Name, err)
	}
	defer r.Close()
	perm := fs.FileMode(0o644)
	if zf.Mode()&0o111 != 0 {
		perm = 0o755 // scripts stay runnable
	}
	f, err := view.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, io.LimitReader(r, int64(zf.UncompressedSize64)))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// GET /v1/skills/metadatas[?names=a,b]
func (v *Surface) listSkills(ctx *fasthttp.RequestCtx) {
	names := map[string]bool{}
	for _, n := range strings.Split(string(ctx.QueryArgs().Peek("names")), ",") {
		if n = strings.TrimSpace(n); n != "" {
			names[n] = true
		}
	}
	api.OK(ctx, map[string]any{"skills": v.skills.of(call.Tenant(ctx), names)})
}

// skill answers the caller's skill the path names, or 404.
func (v *Surface) skill(ctx *fasthttp.RequestCtx) (skillMeta, bool) {
	name, fe := api.PathParam(ctx, "name")
	if fe != nil {
		api.InvalidV1(ctx, fe)
		return skillMeta{}, false
	}
	k := v.skills
	k.mu.Lock()
	s, ok := k.byTenant[call.Tenant(ctx)][name]
	k.mu.Unlock()
	if !ok {
		api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("skill %q not found", name))
	}
	return s, ok
}

// GET /v1/skills/{name}/content: SKILL.md without its front matter, read now.
func (v *Surface) skillContent(ctx *fasthttp.RequestCtx) {
	s, ok := v.skill(ctx)
	if !ok {
		return
	}
	view, err := v.core.ViewOf(ctx)
	if err == nil {
		var body string
		if _, body, err = readSkillFile(view, s.Path); err == nil {
			api.OK(ctx, map[string]any{"name": s.Name, "path": s.Path, "content": body})
			return
		}
	}
	api.Fail(ctx, fasthttp.StatusNotFound, fmt.Sprintf("skill %q: %v", s.Name, err))
}

// DELETE /v1/skills/{name}: unregisters it (its files stay).
func (v *Surface) deleteSkill(ctx *fasthttp.RequestCtx) {
	s, ok := v.skill(ctx)
	if !ok {
		return
	}
	tenant := call.Tenant(ctx)
	k := v.skills
	k.mu.Lock()
	delete(k.byTenant[tenant], s.Name)
	err := k.saveLocked()
	k.mu.Unlock()
	if err != nil {
		api.Fail(ctx, fasthttp.StatusInternalServerError, "keep the skills in the state directory: "+err.Error())
		return
	}
	api.WriteJSON(ctx, fasthttp.StatusOK, api.Envelope{Success: true, Message: "skill " + s.Name + " deleted", Data: s})
}

// DELETE /v1/skills: unregisters every skill of the caller's.
func (v *Surface) clearSkills(ctx *fasthttp.RequestCtx) {
	tenant := call.Tenant(ctx)
	k := v.skills
	k.mu.Lock()
	n := len(k.byTenant[tenant])
	delete(k.byTenant, tenant)
	err := k.saveLocked()
	k.mu.Unlock()
	if err != nil {
		api.Fail(ctx, fasthttp.StatusInternalServerError, "keep the skills in the state directory: "+err.Error())
		return
	}
	api.OK(ctx, map[string]any{"cleared": n})
}
