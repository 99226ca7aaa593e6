"""The one retry policy of ObjectCache's clients, as schemas/retry-policy.ts states it for both
(its numbers are generated into ``_contract``): a refusal the gateway marks retryable is tried
again at most ``Config.retries`` times, before any byte of its answer is used; after the answer's
``Retry-After`` (delay-seconds, at most ``MAX_RETRY_AFTER_S``), else after ``FIRST_BACKOFF_S``
doubled at each try (0.2, 0.4, 0.8 s). A wait that would outlast the call's deadline is not
begun: the refusal is the answer. A gateway that cannot be reached is not a refusal: the next
endpoint is tried, never the same one again."""

from __future__ import annotations

import re
from typing import Optional

from ._contract import DEFAULT_RETRIES as DEFAULT_RETRIES
from ._contract import FIRST_BACKOFF_S as FIRST_BACKOFF_S
from ._contract import MAX_RETRY_AFTER_S as MAX_RETRY_AFTER_S
from ._contract import RETRY_AFTER_PATTERN

_RETRY_AFTER = re.compile(RETRY_AFTER_PATTERN)


def retry_delay(retry_after: Optional[str], attempt: int) -> float:
    """The wait before retry ``attempt`` (1 for the first), in seconds: the answer's
    ``Retry-After``, capped at ``MAX_RETRY_AFTER_S``, else the doubling backoff. A
    ``Retry-After`` that is not delay-seconds (an HTTP-date, a negative number, junk) is ignored."""
    said = retry_after.strip() if retry_after is not None else None
    if said is not None and _RETRY_AFTER.fullmatch(said):
        return min(float(said), MAX_RETRY_AFTER_S)
    # The exponent bounded: 2**30 backoffs are far past the cap already.
    return min(FIRST_BACKOFF_S * float(1 << min(max(attempt - 1, 0), 30)), MAX_RETRY_AFTER_S)
