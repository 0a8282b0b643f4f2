"""What the dataset-shard drivers (hidden_states/, vectors/) share: each runs one shard of an Indexed Job.

- ``dataset``: the JSONL dataset, and which lines a shard owns.
- ``manifest``: a shard's folder, its manifest of finished samples and failed log, resume after a restart.
- ``files``: every write to the output volume (the ``DISK`` seam where tests fill the volume), atomic
  replace, locks; ``tensors``: safetensors headers read and checked without torch.
- ``budget``: the shard's share of the storage budget.
- ``client``: vLLM's HTTP API with the retry classes (Transient, Permanent).
- ``progress``: counts into the job's progress ConfigMap; ``record``: the run record beside the manifest.
- ``run``: ``ShardRun``, one shard from start to its success marker; ``cli``: the argument types and the
  reporting wrapper both subcommands use.
"""
