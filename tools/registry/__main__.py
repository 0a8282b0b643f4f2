"""The command line: ``python -m tools.registry --runtime|--source DIR|--transformers-only|--compare A B``
(the package's docstring is its ``--help``)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from . import __doc__ as OVERVIEW
from .common import say, write_json
from .compare import IGNORED, differences
from .runtime_mode import build_runtime
from .sdist import open_sdist
from .source_mode import build_source
from .transformers_mode import transformers_table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.registry", description=OVERVIEW,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--runtime", action="store_true", help="read the vLLM installed in this interpreter")
    mode.add_argument("--source", type=Path, metavar="DIR", help="read an unpacked vLLM sdist")
    mode.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"),
                      help="print the differences of two tables (read/source fields ignored with --semantic)")  # fmt: skip
    mode.add_argument("--transformers-only", action="store_true", help="write only --transformers-out")
    p.add_argument("--sdist", type=Path,
                   help="runtime mode: the sdist, unpacked or .tar.gz (tests/models/registry.py, the transformers pin)")  # fmt: skip
    p.add_argument("--out", type=Path, help="where to write the table (default: print)")
    p.add_argument("--transformers-out", type=Path, help="also write the transformers table of this interpreter")
    p.add_argument("--transformers-json", type=Path, help="source mode: the transformers table to check names in")
    p.add_argument("--semantic", action="store_true", help="--compare: ignore the 'read' and 'source' fields")
    a = p.parse_args(argv)
    if a.compare:
        docs = [json.loads(x.read_text()) for x in a.compare]
        diffs = differences(*docs, ignore=frozenset(IGNORED) if a.semantic else frozenset())
        print("\n".join(diffs) if diffs else "no differences")
        return 1 if diffs else 0
    if a.transformers_only:
        if a.transformers_out is None:
            p.error("--transformers-only needs --transformers-out")
        write_json(a.transformers_out, transformers_table())
        return 0
    if a.runtime:
        sdist = open_sdist(a.sdist)
        doc = build_runtime(sdist, a.transformers_out)
        if sdist is not None and sdist != a.sdist:
            shutil.rmtree(sdist, ignore_errors=True)
    else:
        doc = build_source(a.source, a.transformers_json)
    n = doc["architectures"]
    say(f"{len(n)} architectures, {sum(e['runner'] == 'pooling' for e in n.values())} with runner pooling, "
        f"{len(doc['remote_code'])} need remote code")  # fmt: skip
    if a.out:
        write_json(a.out, doc)
    else:
        print(json.dumps(doc, indent=1, sort_keys=True))
    if a.runtime:  # tearing down an interpreter that imported every model module takes ~7 s more; all is written
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
