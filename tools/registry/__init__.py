"""Each vLLM version's table of model architectures, read from vLLM itself.

What vLLM's model registry knows about every architecture name it accepts: the class it maps to, whether
that class generates and/or pools, the runner and convert ``--runner auto`` gives it, and for pooling the
tasks its pooler serves; which architectures need ``--trust-remote-code``; and, in a file of its own, the
model classes of the transformers release vLLM tests with (its Transformers backend serves those the
registry lacks). The operator reads the tables (operator/pooling_operator/vllm/registry/README.md) instead
of guessing from architecture names.

Two modes write the same schema:

``--runtime``  in the interpreter of a real vLLM install (the CPU 0.32 runtime of e2e/realvllm/runtime.py):
    vLLM's own ``ModelRegistry``; every model module imported in this process; ``_ModelInfo.from_model_cls``
    per class (the registry's default inspects each class in a subprocess, far too slow); for pooling classes
    the pooler factory the class calls (found in its ``__init__`` along the real MRO) built for real with the
    default PoolerConfig vLLM would give it, and that pooler's ``get_supported_tasks()``. A class whose module
    does not import on CPU (torchvision, torchaudio... are not installed) is read from source instead, and its
    entry says so in ``read``. ``--sdist`` names the unpacked sdist for ``tests/models/registry.py`` (the
    wheel lacks tests/) and the requirement pins.

``--source DIR``  no vLLM needed (for 0.33, which has no CPU wheel): the same table from the unpacked sdist
    by reading it with ``ast``: the registry dicts, the classes through their imports and bases (the C3 MRO),
    the class attributes and decorators behind ``_ModelInfo``, and a small abstract interpreter that follows
    ``self.pooler = ...`` through ``__init__``, ``super().__init__``, ``self._build_pooler(...)`` into the
    pooler factory, and evaluates the factory's ``get_supported_tasks()`` from the pooler classes' source.

Every entry cites file:line (paths inside the ``vllm/`` package, or ``tests/...`` in the sdist). The tables
describe vLLM on CUDA: where vLLM's source branches on ``current_platform`` the CUDA branch is read, and a name
the CPU build maps to a CPU-specific class is read from source in runtime mode too.
operator/pooling_operator/vllm/registry/README.md has the schema and the commands that made the files.

Run from the repository root: ``-m`` puts the current folder on ``sys.path``, which the runtime's interpreter
otherwise lacks.

    python -m tools.registry --runtime --sdist /tmp/vsrc/vllm-0.32.0 --out vllm-0.32.json \\
        [--transformers-out transformers-5.19.0.json]
    python -m tools.registry --source /tmp/vsrc/vllm-0.33.0 --out vllm-0.33.json
    python -m tools.registry --transformers-only --transformers-out transformers-X.json
    python -m tools.registry --compare A.json B.json                   # exit 1 on a difference

Only the standard library is imported outside ``--runtime`` and ``--transformers-out``.

The modules, one concern each (the abstract interpreter first, bottom up, then what is read with it, then the
modes). The interpreter's modules import only downwards, tree <- values <- classes <- pybuiltins, interfaces <-
interp: what a lower one needs of the interpreter it is handed (``values.Interpreter``), never imports.

- ``tree``               the vLLM source tree parsed with ``ast``: modules, bindings, CUDA's platform branches
- ``values``             the interpreter's values, thunks and scopes, and the operators on values
- ``classes``            classes of the tree: members, decorator attributes, the C3 MRO, lookup along an MRO
- ``pybuiltins``         the Python builtins the interpreter knows
- ``interfaces``         vLLM's ``interfaces_base`` rules on the class model (``is_vllm_model``)
- ``interp``             the abstract interpreter: expressions, calls, ``__init__`` run abstractly
- ``reader``             what vLLM makes of a class: registry, ``_ModelInfo`` facts, adapters, pooler and tasks
- ``remote_code``        which architectures need ``--trust-remote-code``, and why
- ``table``              ``--runner auto`` per name, one entry per name, the document
- ``sdist``              the sdist, unpacked or ``.tar.gz``; vLLM's transformers test pin
- ``source_mode``        ``--source``: the table from the sdist, no vLLM imported
- ``runtime_mode``       ``--runtime``: the table from the vLLM of this interpreter, poolers built for real
- ``transformers_mode``  ``--transformers-out``: the transformers classes of this interpreter
- ``compare``            ``--compare``: the differences of two tables
- ``common``             the registry folder, the progress log, the JSON writer
- ``__main__``           the command line
"""
