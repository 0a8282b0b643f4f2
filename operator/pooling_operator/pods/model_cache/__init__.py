"""A ModelCache's fill Job: `huggingface_hub.snapshot_download` into a staging hub cache on the claim, checked
against the Hub's own listing, renamed into place (model_cache/fill.py); its command line is
`pooling-operator model-cache fill` (model_cache/cli.py)."""
