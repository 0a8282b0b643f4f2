//go:build tools

// Package tools pins the OCI registry the release test pushes to and pulls from (go-containerregistry's
// in-memory registry, cmd/registry), built by e2e/kube/build.py like the control plane's binaries.
package tools

import _ "github.com/google/go-containerregistry/cmd/registry"
