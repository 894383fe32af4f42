//go:build tools

// Package tools names the command tools/build.sh builds, so that `go mod tidy` keeps its
// dependencies in go.sum.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
