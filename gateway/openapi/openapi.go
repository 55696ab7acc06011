// Package openapi holds aiod's OpenAPI 3.1 document (openapi.json) and the
// small page that renders it at /docs (docs/), embedded in the binary.
//
// The document is written by hand, once, from the handlers and the specs:
// nothing in it is generated at run time. A test walks the router and fails
// on any route the document does not describe, and the gateway's handler
// tests validate every answer against it (package openapitest).
package openapi

import (
	"bytes"
	"embed"
	"io/fs"
)

//go:embed openapi.json
var document []byte

//go:embed docs
var docs embed.FS

// DocVersion is info.version as written in openapi.json.
const DocVersion = "0.1.0"

// Document returns the OpenAPI document with info.version set to version
// (the binary's, which a build may override).
func Document(version string) []byte {
	if version == DocVersion {
		return document
	}
	return bytes.Replace(document, []byte(`"version": "`+DocVersion+`"`), []byte(`"version": "`+version+`"`), 1)
}

// Docs is the /docs page: index.html, docs.js and docs.css.
func Docs() fs.FS {
	sub, err := fs.Sub(docs, "docs")
	if err != nil { // the folder is embedded: a build problem
		panic(err)
	}
	return sub
}
