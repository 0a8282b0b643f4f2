"""Parse command lines with vLLM's own ``vllm`` CLI (its parser and its serve validation), serving nothing.

    <runtime python> e2e/realvllm/vllm_parse.py < {"argvs": [["vllm", "serve", ...], ...]}
        -> {"results": [{"ok": true, "args": {...}} | {"ok": false, "error": "..."}]}

``vllm.entrypoints.cli.main.main`` runs exactly as ``vllm`` does (sub-command parsers, ``validate``) with the
serve command's action replaced by one that records the parsed namespace. No model is needed. Runs in the
runtime's interpreter; imports nothing from the repository.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys


def parse(argv: list[str]) -> dict:
    import vllm.entrypoints.cli.serve as serve
    from vllm.entrypoints.cli.main import main

    seen: dict = {}

    def record(args) -> None:
        seen.update({k: v for k, v in vars(args).items() if k != "dispatch_function"})

    serve.ServeSubcommand.cmd = staticmethod(record)
    sys.argv = list(argv)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            main()
    except SystemExit as e:  # argparse refuses with exit code 2 and a message on stderr
        return {"ok": False, "error": f"exit {e.code}: {err.getvalue().strip()[-2000:]}"}
    except Exception as e:  # validate_parsed_serve_args and type parsers raise
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    if not seen:
        return {"ok": False, "error": "the serve command never ran"}
    return {"ok": True, "args": json.loads(json.dumps(seen, default=repr))}


def main() -> int:
    req = json.load(sys.stdin)
    json.dump({"results": [parse(a) for a in req["argvs"]]}, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
