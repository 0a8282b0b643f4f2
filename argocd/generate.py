"""The one source of the Argo CD health checks: every kind's `health.lua` and the `argocd-cm.yaml` snippet are
written from the table below (`make argocd`); tests/test_argocd_health.py fails when the committed files differ.

Every script reads the operator's conditions the same way (observedGeneration first, then one rule per
condition in order, the first that holds wins, then a Progressing fallback); only the rules differ per kind.
The scripts use only base Lua: scripts pasted into argocd-cm run without the string and math libraries
unless `useOpenLibs` is set.

    python argocd/generate.py          # write the files
    python argocd/generate.py --check  # exit 1 when a committed file differs
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from pooling_operator.api.resources import KINDS

ROOT = Path(__file__).resolve().parent
CUSTOMIZATIONS = ROOT / "resource_customizations" / "vllm-pooling.io"
CM = ROOT / "argocd-cm.yaml"


@dataclass(frozen=True)
class Rule:
    """When condition `type` has `status` (or, with `reason`, that reason), the health is `health` and the
    message the condition's own (else `fallback`)."""

    type: str
    status: str | None
    health: str
    fallback: str
    reason: str | None = None


@dataclass(frozen=True)
class Check:
    about: tuple[str, ...]  # the script's opening comment, one line each
    what: str  # "the resource", "the job", ...: the message while nothing is observed
    generations: bool  # whether a newer generation than observed is Progressing (not for immutable specs)
    rules: tuple[Rule, ...]
    otherwise: tuple[str, str]  # (condition type, fallback message) of the final Progressing


INVALID = Rule("SpecValid", "False", "Degraded", "The spec breaks a vLLM rule")
SERVICE = Check(
    about=(
        "Argo CD health of a vllm-pooling.io service (PoolingService and ScoringService share this script).",
        "Healthy when Ready; Degraded when the spec breaks a vLLM rule (SpecValid=False) or the workload is",
        "Degraded; Progressing before the operator observed this generation, while rolling out or loading.",
    ),
    what="the resource",
    generations=True,
    rules=(
        INVALID,
        Rule("Degraded", "True", "Degraded", "Degraded"),
        Rule("Ready", "True", "Healthy", "Ready"),
        Rule("Ready", None, "Healthy", "Scaled to zero", reason="ScaledToZero"),
    ),
    otherwise=("Ready", "Waiting for the replicas to become Ready"),
)
JOB = Check(
    about=(
        "Argo CD health of a vllm-pooling.io job (HiddenStateJob and PoolingJob share this script): Healthy only",
        "when Succeeded, Degraded when Failed, when the spec breaks a vLLM rule (SpecValid=False) or nothing can",
        "admit it (Kueue not installed, no such LocalQueue), Suspended while Kueue holds it (Queued=True),",
        "Progressing otherwise (shards running, or not yet observed).",
    ),
    what="the job",
    generations=False,  # the spec is immutable
    rules=(
        INVALID,
        Rule("Failed", "True", "Degraded", "Failed"),
        Rule("Succeeded", "True", "Healthy", "Succeeded"),
        Rule("Queued", None, "Degraded", "Kueue is not installed", reason="KueueNotInstalled"),
        Rule("Queued", None, "Degraded", "The LocalQueue does not exist", reason="LocalQueueNotFound"),
        Rule("Queued", "True", "Suspended", "Waiting for Kueue to admit the job"),
    ),
    otherwise=("Progressing", "Waiting for the shards"),
)
BY_FAMILY: dict[str, Check] = {
    "service": SERVICE,
    "job": JOB,
    "cache": Check(
        about=(
            "Argo CD health of a vllm-pooling.io ModelCache: Degraded when the fill failed (Failed=True: its reason",
            "and message) or the spec breaks a rule (SpecValid=False), Healthy when Ready (a verified snapshot is",
            "in place), Progressing while it fills or before the operator observed this generation.",
        ),
        what="the cache",
        generations=True,
        rules=(INVALID, Rule("Failed", "True", "Degraded", "Failed"), Rule("Ready", "True", "Healthy", "Ready")),
        otherwise=("Progressing", "Filling"),
    ),
    "policy": Check(
        about=(
            "Argo CD health of a vllm-pooling.io AutoscalingPolicy (cluster-scoped): Healthy when Ready (its spec",
            "holds; the message says how many services follow it), Degraded when the spec breaks a rule",
            "(SpecValid=False), Progressing before the operator observed this generation.",
        ),
        what="the policy",
        generations=True,
        rules=(Rule("SpecValid", "False", "Degraded", "The spec breaks a rule"), Rule("Ready", "True", "Healthy", "Ready")),
        otherwise=("Ready", "Waiting for the operator"),
    ),
}
# One script a kind, by its family in the kinds table: a kind added there gets its family's check.
CHECKS: dict[str, Check] = {kind: BY_FAMILY[info.family] for kind, info in KINDS.items()}
BASE_LUA = "Uses only base Lua (argocd-cm scripts get no string/math libraries by default)."


def _about(check: Check) -> list[str]:
    lines = list(check.about)
    if len(lines[-1]) + 1 + len(BASE_LUA) <= 106:
        lines[-1] += " " + BASE_LUA
    else:
        lines.append(BASE_LUA)
    return [f"-- {line}" for line in lines]


def lua(check: Check) -> str:
    """The health script of one kind."""
    out = [*_about(check), "local hs = {}"]
    if check.generations:
        out.append("local generation = obj.metadata.generation")
    out += [
        "if obj.status == nil or obj.status.observedGeneration == nil then",
        '  hs.status = "Progressing"',
        f'  hs.message = "Waiting for the operator to observe {check.what}"',
        "  return hs",
        "end",
    ]
    if check.generations:
        out += [
            "if generation ~= nil and obj.status.observedGeneration < generation then",
            '  hs.status = "Progressing"',
            '  hs.message = "Waiting for the operator to observe generation " .. generation',
            "  return hs",
            "end",
        ]
    out += [
        "local conditions = {}",
        "if obj.status.conditions ~= nil then",
        "  for _, c in ipairs(obj.status.conditions) do",
        "    conditions[c.type] = c",
        "  end",
        "end",
        "local function says(c, fallback)",
        '  if c ~= nil and c.message ~= nil and c.message ~= "" then',
        "    return c.message",
        "  end",
        "  if c ~= nil and c.reason ~= nil then",
        "    return c.reason",
        "  end",
        "  return fallback",
        "end",
    ]
    for rule in check.rules:
        c = f'conditions["{rule.type}"]'
        test = f'{c}.reason == "{rule.reason}"' if rule.reason else f'{c}.status == "{rule.status}"'
        out += [
            f"if {c} ~= nil and {test} then",
            f'  hs.status = "{rule.health}"',
            f'  hs.message = says({c}, "{rule.fallback}")',
            "  return hs",
            "end",
        ]
    kind, fallback = check.otherwise
    out += ['hs.status = "Progressing"', f'hs.message = says(conditions["{kind}"], "{fallback}")', "return hs"]
    return "\n".join(out) + "\n"


def configmap() -> str:
    """The argocd-cm snippet: every script under its Argo CD key, kinds in name order."""
    out = [
        "# The argocd-cm keys that install our health checks into an existing Argo CD (merge into its ConfigMap,",
        "# e.g. kubectl -n argocd patch configmap argocd-cm --patch-file argocd/argocd-cm.yaml).",
        "# Generated by argocd/generate.py with resource_customizations/ (tests/test_argocd_health.py checks they",
        "# agree); the scripts use only base Lua, so they work without useOpenLibs.",
        "apiVersion: v1",
        "kind: ConfigMap",
        "metadata:",
        "  name: argocd-cm",
        "  namespace: argocd",
        "  labels:",
        "    app.kubernetes.io/part-of: argocd",
        "data:",
    ]
    for kind in sorted(CHECKS):
        out.append(f"  resource.customizations.health.vllm-pooling.io_{kind}: |")
        out += [f"    {line}" for line in lua(CHECKS[kind]).splitlines()]
    return "\n".join(out) + "\n"


def files() -> dict[Path, str]:
    """Every generated file and what it must hold."""
    out = {CUSTOMIZATIONS / kind / "health.lua": lua(check) for kind, check in CHECKS.items()}
    out[CM] = configmap()
    return out


def main(argv: list[str]) -> int:
    stale = [p for p, text in files().items() if not p.exists() or p.read_text() != text]
    if "--check" in argv:
        for p in stale:
            print(f"{p.relative_to(ROOT.parent)} is stale: run 'make argocd'")
        return 1 if stale else 0
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(files()[p])
        print(f"wrote {p.relative_to(ROOT.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
