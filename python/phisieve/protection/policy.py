"""The direct scope's names, defaults and check: what a stage's options need to declare and
validate the scope without importing the code that applies it (:mod:`phisieve.protection.
scope`)."""

from __future__ import annotations

from ..errors import ConfigError

SCOPES = ("span", "patient", "identifying", "corpus")
"""The direct-identifier scopes, from the narrowest to the widest."""

DEFAULT_SCOPE = "identifying"
DEFAULT_MIN_SHARE = 0.2

DIRECT_SCOPE_HELP = (
    "How far the words of direct spans reach: span (in place), patient (also the same "
    "patient's other uses), identifying (also corpus-wide the alphabetic words found inside "
    "spans in at least MIN_SHARE of their uses), corpus (every span word everywhere: the old "
    "behaviour)."
)
MIN_SHARE_HELP = "identifying scope: the share of a word's uses inside spans."


def check_scope(scope: str, min_share: float = DEFAULT_MIN_SHARE) -> None:
    """Raise :class:`ConfigError` for an unknown scope or a share outside (0, 1]."""
    if scope not in SCOPES:
        raise ConfigError(f"unknown direct scope {scope!r}; expected one of {', '.join(SCOPES)}")
    if not 0.0 < min_share <= 1.0:
        raise ConfigError(f"min_share must be in (0, 1], not {min_share}")
