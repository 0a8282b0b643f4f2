//go:build tools

// Package tools pins actionlint, which lints the release workflow (.github/workflows/) in `make lint`; built by
// e2e/kube/build.py like the control plane's binaries.
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
