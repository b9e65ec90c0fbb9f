"""Nothing of a test session's cluster survives it: no process, no port, no directory, whether the session
ends after a test that crashed, is interrupted (Ctrl-C: KeyboardInterrupt), or the pytest process is
killed with -9 (the cluster's supervisor sees its parent gone and removes everything)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.helpers.inner_pytest import InnerSuite, gone, leftovers, wait_gone

pytestmark = pytest.mark.slow

BLOCKED = '''
from inner_support import block, cluster_facts, report

def test_waits_to_be_stopped(kraftpy_cluster, kraftpy_topic):
    kraftpy_topic()
    report(**cluster_facts(kraftpy_cluster))
    block()
'''


def test_nothing_is_left_after_a_keyboard_interrupt(tmp_path: Path):
    suite = InnerSuite(tmp_path, {"test_blocked.py": BLOCKED}).start()
    facts = suite.next_report()
    assert len(leftovers(facts)) == 6  # supervisor, zygote, controller, broker, its port, the directory
    assert suite.process is not None
    suite.process.send_signal(signal.SIGINT)
    assert suite.wait() == pytest.ExitCode.INTERRUPTED
    assert "KeyboardInterrupt" in suite.output()
    wait_gone(facts)


FORKING = '''
import os, signal
from inner_support import block, cluster_facts, report

def test_forks_then_waits_to_be_killed(kraftpy_cluster, kraftpy_topic):
    kraftpy_topic()
    kraftpy_cluster.brokers[0].pause()  # a paused node cannot see anything go: it is killed all the same
    child = os.fork()  # an application's worker: it must not keep the cluster alive, nor stop it
    if child == 0:
        signal.pause()  # until the outer test kills it
        os._exit(0)
    report(child=child, **cluster_facts(kraftpy_cluster))
    block()
'''


def test_nothing_is_left_after_the_pytest_process_is_killed(tmp_path: Path):
    """Even with a broker paused, and a child the test forked still running."""
    suite = InnerSuite(tmp_path, {"test_forking.py": FORKING}).start()
    facts = suite.next_report()
    assert len(leftovers(facts)) == 6
    assert suite.process is not None
    suite.process.kill()
    assert suite.wait() == -signal.SIGKILL
    try:
        assert not gone(facts["child"])
        wait_gone(facts)
    finally:
        os.kill(facts["child"], signal.SIGKILL)


CRASHING = '''
from inner_support import cluster_facts, report

def test_crashes(kraftpy_cluster, kraftpy_topic):
    kraftpy_topic()
    report(**cluster_facts(kraftpy_cluster))
    kraftpy_cluster.brokers[0].pause()
    raise RuntimeError("the application under test crashed")

def test_goes_on(kraftpy_cluster, kraftpy_topic):
    kraftpy_topic()  # the cluster serves the next test: the paused broker was resumed
    assert kraftpy_cluster.brokers[0].state == "running"
'''


def test_nothing_is_left_after_a_test_crashed(tmp_path: Path):
    code, out, (facts,) = InnerSuite(tmp_path, {"test_crashing.py": CRASHING}).run()
    assert code == pytest.ExitCode.TESTS_FAILED and "1 failed, 1 passed" in out, out
    assert "RuntimeError: the application under test crashed" in out
    assert not leftovers(facts), leftovers(facts)  # gone by the time pytest exits
