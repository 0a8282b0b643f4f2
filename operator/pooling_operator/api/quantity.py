"""Kubernetes quantities (e.g. 2Ti, 500m) as exact numbers.

Written here rather than imported from the kubernetes client so the pure layers stay free of client
imports (the import-linter contract); the grammar is the small one of apimachinery's resource.Quantity.
"""

from __future__ import annotations

import re
from decimal import Decimal

QUANTITY_PATTERN = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
_SPLIT = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}


def parse_quantity(value: int | str) -> Decimal:
    """The exact value of a quantity; ValueError when it is not one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    text = str(value)
    if not re.fullmatch(QUANTITY_PATTERN, text):
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    number, suffix = _SPLIT.match(text).groups()  # type: ignore[union-attr]
    if suffix[:1] in ("e", "E"):
        return Decimal(number) * (Decimal(10) ** int(suffix[1:]))
    return Decimal(number) * _SUFFIX[suffix]


def binary_quantity(n: int) -> str:
    """Bytes as a Kubernetes binary quantity with at most one decimal (1536 -> 1.5Ki, 5 GiB -> 5Gi)."""
    value, unit = float(n), ""
    for u in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
        if value < 1024:
            break
        value, unit = value / 1024, u
    text = f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{text}{unit}"
