"""One table of kinds (api/resources.KINDS): every per-kind list in the operator is derived from it or held to it
here, so a kind added there is reconciled, built, labelled, judged, health-checked and admitted everywhere."""

from __future__ import annotations

import sys
from pathlib import Path

from pooling_operator.api import identity, kinds
from pooling_operator.api.resources import FAMILY_KINDS, KINDS
from pooling_operator.builders import BUILDERS
from pooling_operator.handlers.admission import VALIDATED
from pooling_operator.reconcile import RECONCILERS
from pooling_operator.vllm.rules import CHAINS
from pooling_operator.vllm.workload import JOB_KINDS, VIEWS

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD_KINDS = FAMILY_KINDS["service"] + FAMILY_KINDS["job"]
OWNER_KINDS = tuple(k for k in KINDS if k not in FAMILY_KINDS["policy"])  # reconciled, with children


def test_every_family_is_one_of_the_known_and_every_kind_has_one() -> None:
    assert sorted(k for ks in FAMILY_KINDS.values() for k in ks) == sorted(KINDS)
    assert FAMILY_KINDS["policy"] == ("AutoscalingPolicy",) and FAMILY_KINDS["cache"] == ("ModelCache",)


def test_the_api_clients_table_takes_our_kinds_from_it() -> None:
    ours = {k.kind: k for k in kinds.KINDS.values() if k.api_version.startswith("vllm-pooling.io/")}
    assert set(ours) == set(KINDS)
    assert all(ours[k].plural == KINDS[k].plural and ours[k].namespaced == KINDS[k].namespaced for k in KINDS)
    assert set(kinds.OWNER_KINDS) == set(OWNER_KINDS) and set(kinds.QUEUED_KINDS) == set(FAMILY_KINDS["job"])
    assert set(kinds.SPACE_KINDS) == {k for k, i in KINDS.items() if i.claims_space} == {"PoolingService", "PoolingJob"}


def test_reconcile_build_and_rules_cover_exactly_their_families() -> None:
    assert set(RECONCILERS) == set(OWNER_KINDS)
    assert set(BUILDERS) == set(WORKLOAD_KINDS)
    assert set(CHAINS) == set(WORKLOAD_KINDS)
    assert set(JOB_KINDS) == set(FAMILY_KINDS["job"])
    assert set(VIEWS) == set(WORKLOAD_KINDS)


def test_labels_admission_and_argocd_cover_every_kind() -> None:
    assert set(identity.COMPONENTS) == set(OWNER_KINDS)
    assert len(set(identity.COMPONENTS.values())) == len(identity.COMPONENTS)
    assert set(VALIDATED) == {i.plural for i in KINDS.values()}
    sys.path.insert(0, str(ROOT / "argocd"))
    try:
        import generate  # argocd/generate.py
    finally:
        sys.path.remove(str(ROOT / "argocd"))
    assert set(generate.CHECKS) == set(KINDS)
    for kind in KINDS:
        assert (ROOT / "argocd" / "resource_customizations" / "vllm-pooling.io" / kind / "health.lua").is_file(), kind
