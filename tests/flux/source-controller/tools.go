//go:build tools

// Package tools pins the upstream command built from this module.
package tools

import _ "github.com/fluxcd/source-controller"
