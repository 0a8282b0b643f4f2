"""The built-in autoscaler: a pure decision (decide.py), the service model and what-if simulator (pure), and
the I/O around them (prometheus.py reads signals, scale.py writes the Deployment's /scale, loop.py drives one
task per namespace while this replica leads)."""
