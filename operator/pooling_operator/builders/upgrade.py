"""An operator upgrade restarts no serving pod. Pure.

A service's pods may run the operator's own image beside vLLM (a compile cache's restore and save containers,
builders/compile_cache.py), and that image is named by the operator's version: applied as built after an
upgrade, every such Deployment's pod template would change and its GPU pods roll for nothing they serve. So where
a Deployment runs and the only difference in its pod template would be those containers' image, the image it runs
is kept (their command line is a contract every release keeps: pods/compile_cache/cli.py); where the template
changes anyway (the spec changed), the pods take the new image with that rollout.
"""

from __future__ import annotations

from typing import Any

from pooling_operator.builders.diff import covers, with_hash


def steady(desired: dict[str, Any], observed: dict[str, Any] | None, operator_image: str) -> dict[str, Any]:
    """`desired`, or, for a running Deployment whose pod template differs only in the image of containers that run
    `operator_image`, `desired` with the images those containers run now."""
    if desired.get("kind") != "Deployment" or observed is None:
        return desired
    want = desired["spec"]["template"]["spec"]
    have = ((observed.get("spec") or {}).get("template") or {}).get("spec") or {}
    running = {c.get("name"): c.get("image") for field in ("initContainers", "containers") for c in have.get(field) or []}

    def kept(c: dict[str, Any]) -> dict[str, Any]:
        image = running.get(c["name"])
        return {**c, "image": image} if c.get("image") == operator_image and image and image != operator_image else c

    pod = {**want, **{f: [kept(c) for c in want[f]] for f in ("initContainers", "containers") if f in want}}
    if pod == want:
        return desired
    candidate = {**desired, "spec": {**desired["spec"], "template": {**desired["spec"]["template"], "spec": pod}}}
    if not covers(observed["spec"]["template"], candidate["spec"]["template"]):
        return desired  # the template changes anyway: the new image comes with that rollout
    return with_hash(candidate)
