//go:build tools

// Package tools pins crane, the image tool of cargo xtask image.
package tools

import _ "github.com/google/go-containerregistry/cmd/crane"
