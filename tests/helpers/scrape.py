"""Reading a process's metrics.port from tests: ``/metrics`` parsed into samples, ``/ready``."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Sample = tuple[str, frozenset[tuple[str, str]]]


def scrape(port: int, timeout: float = 10.0) -> dict[Sample, float]:
    """Every sample of ``GET /metrics``, keyed by (sample name, labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[Sample, float], name: str, **labels: str) -> float | None:
    """The one sample named ``name`` whose labels include ``labels``; None when there is none."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def ready(port: int, timeout: float = 5.0) -> tuple[int, str]:
    """``GET /ready``: (HTTP status, body); (0, reason) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=timeout) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)
