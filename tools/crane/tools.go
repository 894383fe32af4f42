//go:build tools

// Package tools names the command tools/image.sh builds, so that `go mod tidy` keeps its
// dependencies in go.sum.
package tools

import _ "github.com/google/go-containerregistry/cmd/crane"
