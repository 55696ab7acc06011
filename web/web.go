// Package web holds aiod's browser notebook page: plain HTML, CSS and
// JavaScript under static/, embedded in the binary so that the daemon serves
// the page without a build step or a network at run time. The gateway serves
// it at / (gateway/web.go); the end-to-end tests drive it in headless
// Chromium from web/e2e.
package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// FS returns the page's files, rooted at static/: index.html and the
// assets it loads by relative URL (static/app.js, ...).
func FS() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil { // cannot happen: "static" is a valid, embedded path
		panic("web: " + err.Error())
	}
	return sub
}
