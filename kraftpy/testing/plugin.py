"""The pytest plugin: a kraftpy cluster for the tests that ask for one.

Registered as the ``kraftpy`` ``pytest11`` entry point, so it is active wherever kraftpy is installed
(``-p no:kraftpy`` turns it off). It starts nothing and imports nothing heavy until a test asks for a
fixture:

- ``kraftpy_cluster`` (session scope): a `kraftpy.testing.Cluster` of one controller and N brokers,
  started the first time a test asks for it and closed at the end of the session (under pytest-xdist,
  one per worker). Its directory is made under the session's temporary directory and removed at the
  end. A test that struck it with a fault (kill, stop, pause, isolate) is followed by `Cluster.restore`,
  so the next test finds every broker serving again.
- ``kraftpy_topic`` (function scope): a factory, ``kraftpy_topic(partitions=1, replication_factor=None,
  config=None)``, creating a topic of the test's own (named after the test) and returning its name.

Options (command line, or the ini file of the project):

- ``--kraftpy-brokers N`` / ``kraftpy_brokers = N``: the number of brokers (1).
- ``--kraftpy-config KEY=VALUE`` (repeatable) / ``kraftpy_config`` (one ``KEY=VALUE`` a line): broker
  and controller configuration; the command line's win.
- ``--kraftpy-keep``: keep the cluster's directory (data and logs) after the session.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from kraftpy.testing._cluster import Cluster


@dataclass(frozen=True)
class Settings:
    brokers: int = 1
    overrides: Mapping[str, str] = field(default_factory=dict)
    keep: bool = False


SETTINGS = pytest.StashKey[Settings]()
CLUSTER = pytest.StashKey[Cluster]()
#: Topic names are unique in the session: a test run twice (a rerun plugin) gets new ones.
_topic_numbers = itertools.count(1)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kraftpy", "kraftpy cluster (the kraftpy_cluster and kraftpy_topic fixtures)")
    group.addoption("--kraftpy-brokers", metavar="N", default=None,
                    help="brokers of the kraftpy_cluster fixture's cluster, beside its one controller (default 1)")
    group.addoption("--kraftpy-config", metavar="KEY=VALUE", action="append", default=[],
                    help="a broker and controller configuration key for kraftpy_cluster (repeatable)")
    group.addoption("--kraftpy-keep", action="store_true", default=False,
                    help="keep the kraftpy cluster's directory (data and logs) after the session")
    parser.addini("kraftpy_brokers", "brokers of the kraftpy_cluster fixture's cluster (default 1)", default="1")
    parser.addini("kraftpy_config", "broker and controller configuration for kraftpy_cluster, KEY=VALUE a line",
                  type="linelist", default=[])


def _settings(config: pytest.Config) -> Settings:
    option = config.getoption("kraftpy_brokers")
    where, text = ("--kraftpy-brokers", option) if option is not None else ("kraftpy_brokers", config.getini(
        "kraftpy_brokers"))
    text = str(text).strip()
    if not text.isdigit() or int(text) < 1:
        raise pytest.UsageError(f"{where}={text}: the number of brokers is a whole number, at least 1")
    overrides: dict[str, str] = {}
    for where, items in (("kraftpy_config", config.getini("kraftpy_config")),
                         ("--kraftpy-config", config.getoption("kraftpy_config"))):
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise pytest.UsageError(f"{where}: {item!r} is not KEY=VALUE")
            overrides[key.strip()] = value.strip()
    if overrides:  # only then is the configuration schema worth importing
        from kraftpy.testing import _config

        try:
            overrides = _config.normalize_overrides(overrides)
            _config.validate(int(text), overrides)
        except ValueError as exc:
            raise pytest.UsageError(f"kraftpy_config: {exc}") from None
    return Settings(int(text), overrides, bool(config.getoption("kraftpy_keep")))


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SETTINGS] = _settings(config)


@pytest.fixture(scope="session")
def kraftpy_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A kraftpy cluster (one controller, ``--kraftpy-brokers`` brokers) for the whole session."""
    settings = request.config.stash[SETTINGS]
    cluster = Cluster(settings.brokers, directory=tmp_path_factory.getbasetemp(), keep=settings.keep,
                      **settings.overrides)
    cluster.start()
    request.config.stash[CLUSTER] = cluster
    try:
        yield cluster
    finally:
        cluster.close()


def topic_base(test_name: str) -> str:
    """A legal topic name (``[a-zA-Z0-9._-]``, at most 249 characters) made of a test's name."""
    return re.sub(r"[^a-zA-Z0-9._-]+", "-", test_name).strip("-.")[:200] or "test"


@pytest.fixture
def kraftpy_topic(kraftpy_cluster: Cluster, request: pytest.FixtureRequest) -> Callable[..., str]:
    """``kraftpy_topic(partitions=None, replication_factor=None, config=None)``: a new topic of this
    test's own, created and led on every broker; returns its name."""
    base = topic_base(request.node.name)

    def make(partitions: int | None = None, *, replication_factor: int | None = None,
             config: Mapping[str, Any] | None = None) -> str:
        name = f"{base}-{next(_topic_numbers)}"
        kraftpy_cluster.create_topic(name, partitions, replication_factor, config)
        return name

    return make


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After a test that struck the session's cluster with a fault, and after its fixtures are torn
    down: every node back and serving, for the next test."""
    cluster = item.config.stash.get(CLUSTER, None)
    if cluster is not None and cluster.started and cluster.faulted:
        cluster.restore()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    cluster = config.stash.get(CLUSTER, None)
    if cluster is not None and cluster.keep:
        terminalreporter.write_line(f"kraftpy: the cluster's data and logs are kept in {cluster.data_dir}")
