"""Real vLLM in the loop: the CPU vLLM 0.32 runtime, the models it serves here, and a pod runner.

``runtime`` installs the runtime and prepares the models into a cache outside the clone; ``kubelet`` is the
test-only pod runner that plays the kubelet of one node kwok does not manage.
"""
