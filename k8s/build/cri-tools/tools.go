//go:build tools

// Package tools only names the command build.sh builds, so that `go mod tidy` keeps its
// dependencies in go.sum.
package tools

import (
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
)
