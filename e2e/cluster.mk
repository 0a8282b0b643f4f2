# Real Kubernetes control plane for tests and the demo (see e2e/README.md).
# Included from the top-level Makefile; uses $(PY) (the venv python) and runs from $(CURDIR), the repo root.
#
#   make cluster-build    build/cache kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kwok
#   make cluster-up       start the control plane in the background (idempotent); kubeconfig in .cluster/kubeconfig
#   make cluster-down     stop it and remove its processes and etcd data
#   make cluster-status   print ports, pids and timings of the running control plane
#   make cluster-logs     print the tail of every component's log
#
# The fake cluster's shape comes from VPO_GPU_NODES (4), VPO_GPUS_PER_NODE (8) and VPO_CPU_NODES (1);
# the binary cache from VPO_CACHE_DIR (default $${XDG_CACHE_HOME:-~/.cache}/vllm-pooling-operator).

PY ?= .venv/bin/python
CLUSTER_DIR ?= $(CURDIR)/.cluster
E2E_PY = cd $(CURDIR) && $(PY) -m

.PHONY: cluster-build cluster-up cluster-down cluster-status cluster-logs

cluster-build:
	$(E2E_PY) e2e.kube.build

cluster-up:
	$(E2E_PY) e2e.kube.cli up --run-dir $(CLUSTER_DIR)

cluster-down:
	$(E2E_PY) e2e.kube.cli down --run-dir $(CLUSTER_DIR)

cluster-status:
	$(E2E_PY) e2e.kube.cli status --run-dir $(CLUSTER_DIR)

cluster-logs:
	$(E2E_PY) e2e.kube.cli logs --run-dir $(CLUSTER_DIR)
