"""Pure knowledge of vLLM, per version: flags, runner/convert/task rules, pooler config, Matryoshka, routes
per task, metric names, and spec -> `vllm serve` argv."""
