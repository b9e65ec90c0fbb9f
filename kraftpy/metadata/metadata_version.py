"""metadata.version: the levels kraftpy runs at, their Kafka release names, and what each level turns on.

A cluster's metadata.version is a FeatureLevelRecord in its metadata log. It starts at the level
`kraftpy storage format --release-version` chose (the newest by default) and is raised online with
UpdateFeatures (`kraftpy features upgrade --release-version 3.9`, or `--feature metadata.version=21`):
the controller writes the new level once every registered broker supports it, every node applies it as
the record reaches it, and nothing restarts. It never goes down.

The levels are Kafka's (MetadataVersion): 7 is 3.3-IV3, the first whose broker registration records
carry the controlled-shutdown flag kraftpy's controller writes; 21 is 3.9-IV0, the release whose protocol
kraftpy serves. What a level turns on, as in Kafka:

- **SCRAM credentials** (UserScramCredentialRecord) from 3.5-IV2 (`SCRAM_LEVEL`): below it
  AlterUserScramCredentials is answered UNSUPPORTED_VERSION, and `storage format --add-scram` refuses a
  release version that cannot hold the credentials.
- **The replica fetchers' Fetch version** (`fetch_request_version`): 13 up to 3.4, 15 (the follower's
  broker epoch) from 3.5-IV1, 16 from 3.7-IV4, 17 (its log directory) from 3.9-IV0.

Every other record kraftpy writes is written the same way at every level: kraftpy's metadata log is read
by kraftpy only, and each kraftpy that writes a record version reads the earlier ones.
"""

from __future__ import annotations

import re

#: level -> Kafka's name for it (MetadataVersion.version()).
NAMES: dict[int, str] = {
    7: "3.3-IV3",
    8: "3.4-IV0",
    9: "3.5-IV0",
    10: "3.5-IV1",
    11: "3.5-IV2",
    12: "3.6-IV0",
    13: "3.6-IV1",
    14: "3.6-IV2",
    15: "3.7-IV0",
    16: "3.7-IV1",
    17: "3.7-IV2",
    18: "3.7-IV3",
    19: "3.7-IV4",
    20: "3.8-IV0",
    21: "3.9-IV0",
}
MINIMUM = min(NAMES)
LATEST = max(NAMES)
#: The first level with SCRAM credentials in the metadata log (Kafka's MetadataVersion.isScramSupported).
SCRAM_LEVEL = 11

_RELEASE = re.compile(r"^(\d+)\.(\d+)(?:-IV(\d+))?$")


class ReleaseVersionError(ValueError):
    """A release version kraftpy cannot run at; its message is one line naming the ones it can."""


def name(level: int) -> str:
    """Kafka's name of ``level`` (``3.9-IV0``), or the number itself for a level without one."""
    return NAMES.get(level, str(level))


def parse_release_version(text: str) -> int:
    """The level of a release version as Kafka's tools take it: ``3.9-IV0``, or ``3.7`` (the release's last
    level, 3.7-IV4)."""
    match = _RELEASE.match(text.strip())
    if match is None:
        raise ReleaseVersionError(f"{text!r} is not a release version (for example 3.9 or 3.7-IV2)")
    release = f"{match[1]}.{match[2]}"
    levels = [level for level, known in NAMES.items() if known.split("-")[0] == release
              and (match[3] is None or known == f"{release}-IV{match[3]}")]
    if not levels:
        raise ReleaseVersionError(f"release version {text} is not one kraftpy can run at: "
                                  f"{NAMES[MINIMUM]} to {NAMES[LATEST]}")
    return max(levels)


def scram_supported(level: int) -> bool:
    return level >= SCRAM_LEVEL


def fetch_request_version(level: int) -> int:
    """The Fetch version a follower sends its leader at ``level``, as Kafka's MetadataVersion chooses it:
    every broker of a cluster at that level serves it, mid-upgrade too. 17 from 3.9-IV0 (the follower's
    log directory, KIP-853), 16 from 3.7-IV4 (KIP-951), 15 from 3.5-IV1 (the follower's broker epoch,
    KIP-903), 14 from 3.5-IV0, else 13."""
    if level >= 21:
        return 17
    if level >= 19:
        return 16
    if level >= 10:
        return 15
    if level >= 9:
        return 14
    return 13
