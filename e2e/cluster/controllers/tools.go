//go:build tools

// Package tools pins the third-party controllers the e2e tests run beside the operator: KEDA's operator and
// metrics adapter, and Kueue (built by e2e/kube/build.py into their own cache folder). KEDA's replace block is
// copied into go.mod: a dependency's replace directives do not apply to the module that requires it.
package tools

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
