"""Real-cluster test support: a Kubernetes control plane built from pinned Go modules, run as local processes.

- ``e2e.build``        builds (or finds) kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
                       etcd and kwok, cached outside the clone (``python -m e2e.build``).
- ``e2e.controlplane`` starts and stops etcd, the Kubernetes components and kwok with fake GPU nodes
                       (``python -m e2e.cluster_cli up|down|status|logs``).
- ``e2e.harness``      what ``e2e.controlplane`` is built from: polling, PKI, processes, REST client, cluster
                       config, component flags, state files (one module each).
- ``e2e.crds``         installs third-party CRDs (KEDA, prometheus-operator) from their Go modules and ours.

Nothing here is imported by the operator package.
"""
