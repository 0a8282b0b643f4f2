"""The Kubernetes control plane and the third-party controllers, built from pinned Go modules (``e2e/cluster/``)
and run as local processes: ``build``, ``controlplane``, ``cli``, ``crds``, ``keda``, ``kueue``, ``thirdparty`` (what
KEDA's and Kueue's harnesses share), ``prometheus``
(the map: e2e/__init__.py)."""
