"""Everything the suite runs for real beside the operator. The map (e2e/README.md has it too):

- ``e2e.kube``       the Kubernetes control plane and the third-party controllers, as local processes:
                     ``build`` (etcd, kube-*, kwok, KEDA, Kueue from pinned Go modules, cached outside the clone;
                     ``python -m e2e.kube.build``), ``controlplane`` (etcd, the components and kwok with fake GPU
                     nodes), ``cli`` (``python -m e2e.kube.cli up|down|status|logs``), ``crds`` (third-party CRDs
                     from their modules, and ours), ``keda``, ``kueue`` and what they share (``thirdparty``),
                     ``prometheus`` (Debian's Prometheus).
- ``e2e.harness``    what the control plane and the controllers are built from, one concern a module: polling,
                     PKI, processes, REST client, cluster config, component flags, state files, network
                     namespaces, the audit log.
- ``e2e.podrunner``  the test kubelet: plays the kubelet of one node kwok does not manage and runs the pods the
                     operator renders, for real (``kubelet``, ``pods``, ``podspec``, ``lifecycle``,
                     ``runner_process``, ``traffic`` (bounded load routed to its pods as a Service and a PodMonitor would);
                     ``connector_shim`` for vLLM's hidden-state connector on a CPU).
- ``e2e.realvllm``   real vLLM 0.32 (CPU): ``runtime`` installs it and prepares the models, ``tiny_models`` builds
                     small ones from packaged weights, ``built``, ``oracles`` (sentence-transformers and
                     transformers answers), ``vllm_parse``.
- ``e2e.standin``    vLLM stand-ins for the fast tiers: the hidden-state server, the metric exporters (the
                     simulator's service model on /metrics), the Hub stand-in, vLLM's CLI parser.
- the suite's own programs: ``tiers`` (the e2e tiers side by side), ``ledger`` (make test's ledger), ``demo``
  (``make demo``), ``image`` (the operator image with buildah), ``operator_process`` (the operator under test),
  ``conftest`` (the fixtures); the tests are in ``e2e/tests``.

Nothing here is imported by the operator package. The generator of the operator's vLLM registry tables is
tooling, not test support: ``tools/registry``.
"""
