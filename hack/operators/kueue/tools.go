//go:build tools

// Package tools records the command this module builds, so that
// `go mod tidy` keeps its dependencies.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
