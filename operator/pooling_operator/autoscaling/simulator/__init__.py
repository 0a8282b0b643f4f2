"""The what-if simulator: a model of vLLM fitted on real vLLM 0.32 (`servicemodel`), request traces (`trace`),
what Prometheus would answer (`promql`), the baselines ours is compared with (`baselines`), the replay that
drives the operator's own decision code (`simulate`) and the `pooling-operator simulate` command (`cli`).
Pure but for the command's file reading: values in, values out."""
