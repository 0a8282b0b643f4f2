"""The pieces ``e2e.kube.controlplane.ControlPlane`` is built from, one concern per module:

- ``poll``        ``wait_for``, the one polling loop, with ``Timeout`` and ``Fatal``.
- ``pki``         CA, serving and client certs, service-account keys; the admin kubeconfig.
- ``processes``   free ports, spawning components, the per-run process registry and ``reap_strays``, log tails.
- ``rest``        ``Api``/``ApiError``, the dependency-free REST client (admin cert), and HTTP(S) probes.
- ``config``      ``ClusterConfig`` and the kwok Node objects of the fake cluster.
- ``components``  the command-line flags of etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok.
- ``state``       the run folder's ``state.json`` and ``supervisor.json``.
- ``audit``       the API server's audit policy and log (who the operator's ServiceAccount asked for what).
- ``netns``       a network namespace of the harness's own, a veth pair and a TCP relay into loopback.

``e2e.kube.controlplane`` re-exports the names callers used before the split; import them from there.
"""
