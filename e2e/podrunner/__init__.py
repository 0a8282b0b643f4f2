"""The test kubelet: runs the pods the operator renders for real on this machine, for the one node kwok does not
manage. ``kubelet`` watches the node's pods and reports their status; ``pods`` and ``lifecycle`` run a pod's
containers (init, native sidecars, probes); ``podspec`` turns a pod spec into processes, volumes and env;
``runner_process`` starts the runner beside a control plane; ``traffic`` routes bounded test load to its pods
(as a Service's EndpointSlices and a PodMonitor would); ``connector_shim`` lets vLLM's hidden-state
connector run on a CPU (the map: e2e/__init__.py)."""
