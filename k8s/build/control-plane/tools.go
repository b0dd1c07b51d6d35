//go:build tools

// Package tools only names the commands `build.sh control-plane` builds, so that `go mod tidy`
// keeps their dependencies in go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
