"""The programs that run inside workload pods, in the operator's image, as ``pooling-operator <subcommand>``.

One family, one wing. The operator renders their command lines (builders/) and reads what they write
(status/) only through the contract modules in api/ (``shard_contract``, ``pooling_job_contract``,
``cache_fill_contract``; a compile cache shares nothing but its command line, which builders/compile_cache.py renders); nothing here imports builders/, status/, reconcile/,
runtime/, handlers/ or autoscaling/, and no program imports another (pyproject.toml's import contracts).

- ``shard/``: what every dataset-shard driver shares: the dataset reader, the manifest and failed log, the
  file-system primitives and the safetensors checks, the storage budget, progress into a ConfigMap, the run
  record, the HTTP client's retry classes and the run of one shard (``run.ShardRun``).
- ``hidden_states/``: a HiddenStateJob's driver (``pooling-operator hidden-states run``), beside vLLM's
  hidden-states connector.
- ``vectors/``: a PoolingJob's driver (``pooling-operator pooling-job preflight|run``), vLLM's pooling API
  into safetensors part files.
- ``model_cache/``: a ModelCache's fill Job (``pooling-operator model-cache fill``).
- ``compile_cache/``: a service pod's compile cache on a volume (``pooling-operator compile-cache
  restore|save``).
"""
