"""The hidden-state Job driver: runs inside each pod of a HiddenStateJob's Indexed Job, beside vLLM.

It feeds its shard of the dataset to vLLM one prompt per request, checks every safetensors file the
hidden-states connector writes, moves it into ``<output>/shard-<I>/`` and records it in the shard's
manifest, resumes from that manifest after a restart, keeps to its share of the storage budget and
reports progress into the job's ConfigMap. ``pooling-operator hidden-states run`` is its entry point
(see cli.py); it never imports handlers/ or reconcile.

The same package drives a PoolingJob ("vectors" mode): ``pooling-operator pooling-job preflight|run``
(pooling_cli.py, pooling_driver.py) sends batches to vLLM's pooling API and writes one safetensors part file
per batch (vectors.py), sharing the dataset, manifest writer, progress, budget and run record, and the shard
machinery (shard.py) with the HiddenStateJob driver.
"""
