"""A service's compile cache on a volume (`engine.compileCache`): each pod restores vLLM's cache root from the
entry of its key before vLLM starts, and one pod saves it there once vLLM is up (store.py); the command lines
are `pooling-operator compile-cache restore|save` (cli.py), rendered by builders/services.py."""
