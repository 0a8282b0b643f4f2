//go:build tools

// Package tools pins helm for the e2e harness (built by e2e/kube/build.py).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
