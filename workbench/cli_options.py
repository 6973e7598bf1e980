"""The command line's arguments before argparse and its errors: a negative number taken as an
option's value, and an option the command does not take named with the one meant."""
from __future__ import annotations

import argparse
import re

_NUMBER = re.compile(r"-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|-(inf|nan)$", re.I)


def signed_values(argv: list) -> list:
    """["--rank-by", "-episode_length"] -> ["--rank-by=-episode_length"], and the same for a negative
    number in any form (--lr -1e-3): argparse takes a value that starts with '-' for an option of its own."""
    out = []
    for token in argv:
        previous = out[-1] if out else ""
        joins = previous.startswith("--") and previous != "--" and "=" not in previous and not token.startswith("--")
        if joins and (out[-1] == "--rank-by" and token.startswith("-") or _NUMBER.match(token)):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def parse_with_hints(parser, argv: list):
    """argparse's error for options the command does not take, with the option meant where one is
    close (another library's name, a spelling, a key of the config as a flag: --learning-rate)."""
    import difflib
    from .learn.config_names import ITERATION_COUNTS, SYNONYMS
    args, extra = parser.parse_known_args(argv)
    if not extra:
        return args
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
    options = [o for a in sub._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    for token in (t.split("=", 1)[0] for t in extra if t.startswith("--")):
        key = token[2:].replace("-", "_")
        ours = SYNONYMS.get(key)
        meant = f"--{ours.replace('_', '-')}" if ours else None
        if key in ITERATION_COUNTS and "--total-env-steps" in options:
            hints.append(f"{token}: a run's length is --total-env-steps (env-steps, not iterations)")
        elif meant in options:
            hints.append(f"{token}: did you mean {meant}?")
        elif close := difflib.get_close_matches(token, options, n=1, cutoff=0.7):
            hints.append(f"{token}: did you mean {close[0]}?")
    sub.error(f"unrecognized arguments: {' '.join(extra)}" + (f" ({'; '.join(hints)})" if hints else "")
              + f"; `python -m workbench {args.command} --help` lists the options")
