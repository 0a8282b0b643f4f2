"""A PoolingJob's driver: runs inside each pod of the job's Indexed Job, beside vLLM.

``pooling-operator pooling-job preflight|run`` (cli.py) sends batches of its shard to vLLM's pooling API
(client.py) and writes one safetensors part file per batch (parts.py), on the shared shard machinery
(pods/shard/: dataset, manifest, progress, budget, run record, ``ShardRun``); driver.py ties them together.
"""
