"""The API server's audit log, as the harness writes and reads it: one file format, one policy.

The policy logs, at Metadata level, only the requests of the users named (the operator's ServiceAccount), one
line per finished request; `Audit.since` counts them by verb and resource, watches aside, optionally for one
namespace. The API server's own request metrics have no client label, so this is how the operator's own
requests are told apart from kube-controller-manager's, kwok's and the tests'.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

OPERATOR_USER = "system:serviceaccount:vllm-pooling-operator:vllm-pooling-operator"
READS = ("get", "list")
NEVER_ROTATE_MB = 1 << 20  # a terabyte of audit log
WRITES = ("create", "update", "patch", "delete", "deletecollection")


def policy(users: tuple[str, ...]) -> dict[str, Any]:
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [{"level": "Metadata", "users": list(users)}, {"level": "None"}],
    }


def apiserver_flags(run_dir: Path, users: tuple[str, ...]) -> list[str]:
    """Write the policy into run_dir; the flags that make kube-apiserver log to run_dir/audit.log."""
    import yaml

    path = run_dir / "audit-policy.yaml"
    path.write_text(yaml.safe_dump(policy(users)))
    # --audit-log-maxsize=0 is not "never": the API server's log writer (lumberjack) then rotates at its default
    # of 100 MB (k8s.io/apiserver pkg/server/options/audit.go 509-515, lumberjack.go 41, 85-86), which 10,000
    # services' creation passes; a mark would then point into the new file. A size no run reaches instead.
    return [f"--audit-policy-file={path}", f"--audit-log-path={run_dir / 'audit.log'}", f"--audit-log-maxsize={NEVER_ROTATE_MB}"]


class Audit:
    def __init__(self, path: Path, user: str = OPERATOR_USER) -> None:
        self.path = path
        self.user = user

    def mark(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def since(self, mark: int, namespace: str | None = None) -> Counter[tuple[str, str]]:
        """Requests by (verb, resource[/subresource]) of the user since `mark` (watches aside)."""
        counts: Counter[tuple[str, str]] = Counter()
        if not self.path.exists():
            return counts
        rotated = sorted(p.name for p in self.path.parent.glob(f"{self.path.stem}-*{self.path.suffix}"))
        if rotated:  # what was logged since the mark is partly in another file: a count would be too low
            raise RuntimeError(f"the audit log rotated ({', '.join(rotated)}): counts since a mark would be wrong")
        with self.path.open("rb") as f:
            f.seek(mark)
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue  # a line being written
                if (e.get("user") or {}).get("username") != self.user or e.get("verb") == "watch":
                    continue
                ref = e.get("objectRef") or {}
                if namespace is not None and ref.get("namespace") != namespace:
                    continue
                resource = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                counts[(e.get("verb", "?"), resource)] += 1
        return counts


def split(counts: Counter[tuple[str, str]]) -> tuple[int, int, dict[str, int]]:
    """(reads, writes, {"verb resource": n})."""
    reads = sum(v for (verb, _), v in counts.items() if verb in READS)
    writes = sum(v for (verb, _), v in counts.items() if verb in WRITES)
    return reads, writes, {f"{verb} {res}": v for (verb, res), v in sorted(counts.items())}
