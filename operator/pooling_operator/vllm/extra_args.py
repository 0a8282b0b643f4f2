"""`engine.extraArgs`, parsed once into typed tokens the way `vllm serve`'s argument parser reads them.

The rules (vllm/rules.py) report on the tokens; the other readers ask the parsed value (`given`: the known
flags and their values, the last occurrence winning as in vLLM) or, where no contract is at hand, the
option names as written (`option_names`, `_` read as `-`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pooling_operator.vllm.contract import Contract


@dataclass(frozen=True)
class Token:
    """One element of extraArgs as vLLM reads it (a flag with the value it consumed, or a stray word)."""

    index: int  # position of the option in extraArgs
    text: str  # the option as written
    is_flag: bool  # starts with "-" (and is not "-" or "--")
    flag: str | None  # the canonical flag this version knows; None for unknown flags and stray words
    value: str | None  # attached (--x=v, -O3) or the next element; None for switches
    missing_value: bool = False  # takes a value and none follows

    @property
    def name(self) -> str:
        """The option as written without ``=value``."""
        return self.text.split("=", 1)[0]


@dataclass(frozen=True)
class ExtraArgs:
    tokens: tuple[Token, ...]

    @property
    def given(self) -> dict[str, str | None]:
        """{canonical flag: value} for the flags this version knows; the last occurrence wins, as in vLLM;
        ``--no-x`` forms keep their own name."""
        return {t.flag: t.value for t in self.tokens if t.flag is not None and not t.missing_value}


def parse(args: Sequence[str], c: Contract) -> ExtraArgs:
    tokens: list[Token] = []
    i = 0
    while i < len(args):
        arg, index = args[i], i
        i += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            tokens.append(Token(index, arg, is_flag=False, flag=None, value=None))
            continue
        flag = c.canonical(arg)
        if flag is None:
            value = None
            if "=" not in arg and i < len(args) and not args[i].startswith("-"):
                value, i = args[i], i + 1  # its value: one problem per unknown flag
            tokens.append(Token(index, arg, is_flag=True, flag=None, value=value))
            continue
        value = attached_value(arg, c)
        missing = False
        if c.flags[flag].takes_value and value is None:
            if i < len(args) and (not args[i].startswith("-") or is_number(args[i])):
                value, i = args[i], i + 1
            else:
                missing = True
        tokens.append(Token(index, arg, is_flag=True, flag=flag, value=value, missing_value=missing))
    return ExtraArgs(tuple(tokens))


def option_names(args: Sequence[str]) -> set[str]:
    """The options as written (``_`` read as ``-``, ``=value`` dropped), known to a version or not."""
    return {a.split("=", 1)[0].replace("_", "-") for a in args if a.startswith("-")}


def attached_value(arg: str, c: Contract) -> str | None:
    """The value written into the option itself: --flag=VALUE, or a short alias with it attached (-O3)."""
    if "=" in arg:
        return arg.split("=", 1)[1]
    if not arg.startswith("--") and arg not in c.aliases and len(arg) > 2 and arg[:2] in c.aliases:
        return arg[2:]
    return None


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
