module vllm-pooling-operator.invalid/e2e/cluster/registry

go 1.26.0

require github.com/google/go-containerregistry v0.22.1
