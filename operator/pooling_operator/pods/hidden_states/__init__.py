"""The hidden-state Job driver: runs inside each pod of a HiddenStateJob's Indexed Job, beside vLLM.

It feeds its shard of the dataset to vLLM one prompt per request, checks every safetensors file the
hidden-states connector writes, moves it into ``<output>/shard-<I>/`` and records it in the shard's
manifest, resumes from that manifest after a restart, keeps to its share of the storage budget and
reports progress into the job's ConfigMap (all on pods/shard/). ``pooling-operator hidden-states run`` is
its entry point (cli.py); driver.py is the driver.
"""
