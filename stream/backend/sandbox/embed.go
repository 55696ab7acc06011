package sandbox

import _ "embed"

// ConfinePy is confine.py: the Python applier a kernel template runs in
// itself and in each forked child (kernel.TemplateConfig.Confine).
//
//go:embed confine.py
var ConfinePy string
