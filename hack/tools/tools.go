//go:build tools

// Package tools pins the Go tools the test suite drives: helm (the chart's lint,
// template and dry-run tests) and promtool (the alert rules' check and unit tests).
// hack/build-tools.sh builds them from this module.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
	_ "helm.sh/helm/v4/cmd/helm"
)
