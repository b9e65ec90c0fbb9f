"""What a user's `pip install` brings is enough: the built wheel and sdist, in fresh venvs.

The wheel and the sdist are built once (from a copy of the sources, so the work tree is left as it
is) and installed, without the ``dev`` extra, into three new venvs side by side:

- ``base-wheel``: ``pip install kraftpy-*.whl``
- ``base-sdist``: ``pip install kraftpy-*.tar.gz`` (built from source, C accelerator included)
- ``spark-wheel``: ``pip install 'kraftpy-*.whl[spark]'``
- ``testing-wheel``: ``pip install 'kraftpy-*.whl[testing]'`` and the clients, no more: the example
  application of ``examples/testing`` runs its tests there, with the installed pytest plugin.

In each, every command and subcommand of the ``kraftpy`` tree answers ``--help`` (the tree is read
from the installed app, so a new command is covered without a change here), and a ``kraftpy dev``
started from that venv serves ``kraftpy perf produce`` and ``kraftpy perf consume``. The base venv
shows that the Spark connector without its extra is one line naming ``kraftpy[spark]``; the spark
venv runs the batch example of docs/spark.md, as the page shows it.

Commands run from a temporary directory with no PYTHONPATH: the venvs see the installed kraftpy,
never the source tree. pip's cache is used as usual, so only a first run downloads.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.processes import free_ports

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: What the build reads: the sdist is made from these, and the wheel from the sdist.
SOURCES = ("pyproject.toml", "setup.py", "README.md", "kraftpy")
#: venv name -> (artifact, extras)
INSTALLS = {"base-wheel": ("wheel", ""), "base-sdist": ("sdist", ""), "spark-wheel": ("wheel", "[spark]")}
#: The venv of the kraftpy.testing example: the wheel with its testing extra, and the clients the example
#: uses, at the versions the dev extra pins (those the test suite runs).
EXAMPLE_VENV = "testing-wheel"
EXAMPLE_CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")
TIMEOUT = 300  # bounds a hung step only


@dataclass(frozen=True)
class Venv:
    name: str
    path: Path
    cwd: Path

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    @property
    def kraftpy(self) -> str:
        return str(self.path / "bin" / "kraftpy")

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.path)
        return {**env, **extra}

    def run(self, *argv: str, timeout: float = TIMEOUT, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=self.cwd, env=self.env(**env), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)


def _check(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{done.args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="session")
def packaging_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("packaging")


@pytest.fixture(scope="session")
def artifacts(packaging_dir: Path) -> dict[str, Path]:
    src = packaging_dir / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info"))
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = packaging_dir / "dist"
    _check(subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(src)], cwd=packaging_dir,
                          capture_output=True, text=True, timeout=TIMEOUT))
    (wheel,) = dist.glob("kraftpy-*.whl")
    (sdist,) = dist.glob("kraftpy-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def make_venv(root: Path, name: str, *requirements: str) -> Venv:
    """A new venv with only ``requirements`` (and what they depend on) installed."""
    path = root / name
    cwd = root / f"{name}-cwd"
    cwd.mkdir()
    _check(subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)],
                          capture_output=True, text=True, timeout=TIMEOUT))
    # The test's own pip installs into the new venv (what `venv/bin/pip install` would do, without
    # first installing pip there). Without compiling every module of every package to bytecode at
    # install (pyspark's alone take most of a venv's install): the modules a test imports are
    # compiled then, and every source file is still checked when a command imports it.
    _check(subprocess.run([sys.executable, "-m", "pip", "--python", str(path / "bin" / "python"), "install",
                           "--quiet", "--disable-pip-version-check", "--no-compile", *requirements],
                          cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT))
    return Venv(name, path, cwd)


def pinned(names: tuple[str, ...]) -> list[str]:
    """The dev extra's requirement of each of ``names``."""
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    return [next(r for r in dev if re.split(r"[ <>=!~;\[]", r, maxsplit=1)[0] == name) for name in names]


@pytest.fixture(scope="session")
def installs(artifacts: dict[str, Path], packaging_dir: Path) -> Iterator[dict[str, Future[Venv]]]:
    """The venvs, installed concurrently; a test waits only for the one it uses."""
    with ThreadPoolExecutor(len(INSTALLS) + 1) as pool:
        futures = {name: pool.submit(make_venv, packaging_dir, name, f"{artifacts[kind]}{extras}")
                   for name, (kind, extras) in INSTALLS.items()}
        futures[EXAMPLE_VENV] = pool.submit(make_venv, packaging_dir, EXAMPLE_VENV, f"{artifacts['wheel']}[testing]",
                                            *pinned(EXAMPLE_CLIENTS))
        yield futures


@pytest.fixture(scope="session", params=list(INSTALLS))
def venv(request, installs: dict[str, Future[Venv]]) -> Venv:
    return installs[request.param].result(timeout=TIMEOUT)


class Dev:
    """``kraftpy dev`` run by a venv's console script, on ephemeral ports."""

    def __init__(self, venv: Venv, directory: Path) -> None:
        port, controller_port = free_ports(2)
        self.bootstrap = f"127.0.0.1:{port}"
        self.log = directory.with_suffix(".log")
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [venv.kraftpy, "dev", "--dir", str(directory), "--port", str(port), "--controller-port",
                 str(controller_port), "--log-format", "json"],
                cwd=venv.cwd, env=venv.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            assert self.process.stdout is not None
            for raw in self.process.stdout:
                lines.put(raw.decode(errors="replace"))
            lines.put(None)

        threading.Thread(target=read, name="dev-stdout", daemon=True).start()
        while True:
            line = lines.get(timeout=120)  # bounds a failure only
            assert line is not None, f"kraftpy dev exited:\n{self.log.read_text()[-3000:]}"
            if "kraftpy dev is running" in line:
                assert f"bootstrap.servers={self.bootstrap}" in line
                return

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        assert self.process.wait(60) == 0, self.log.read_text()[-3000:]


@pytest.fixture(scope="session")
def dev(venv: Venv, packaging_dir: Path) -> Iterator[Dev]:
    server = Dev(venv, packaging_dir / f"{venv.name}-dev")
    yield server
    server.stop()


# Lists every command path of the installed `kraftpy` tree and runs `kraftpy <path> --help` for each
# in one interpreter (one process per command would take a second each), with the app `kraftpy <path>`
# builds: its first command's module alone (typer converts the app it is given at every invocation).
HELP_WALKER = """
import json, sys, kraftpy
import typer
from typer.testing import CliRunner
from kraftpy.cli.main import app, build_app

def walk(command, path):
    yield path
    for name, sub in sorted((getattr(command, "commands", None) or {}).items()):
        yield from walk(sub, [*path, name])

runner = CliRunner()
results = []
for path in walk(typer.main.get_command(app), []):
    result = runner.invoke(build_app(path[:1]) if path else app, [*path, "--help"], prog_name="kraftpy")
    results.append({"path": path, "exit_code": result.exit_code, "output": result.output,
                    "exception": None if result.exception is None or isinstance(result.exception, SystemExit)
                    else repr(result.exception)})
json.dump({"kraftpy": kraftpy.__file__, "results": results}, sys.stdout)
"""


def test_every_command_answers_help(venv: Venv) -> None:
    top = _check(venv.run(venv.kraftpy, "--help"))
    assert "Usage: kraftpy" in top.stdout
    report = json.loads(_check(venv.run(venv.python, "-c", HELP_WALKER)).stdout)
    # The installed kraftpy, not the source tree.
    assert Path(report["kraftpy"]).is_relative_to(venv.path), report["kraftpy"]
    paths = [" ".join(r["path"]) for r in report["results"]]
    assert {"dev", "server", "broker", "controller", "storage format", "perf produce", "perf consume",
            "quorum status"} <= set(paths)
    failed = [f"kraftpy {' '.join(r['path'])} --help: exit {r['exit_code']} {r['exception'] or ''}\n{r['output']}"
              for r in report["results"] if r["exit_code"] != 0 or r["exception"] or "Usage" not in r["output"]]
    assert not failed, "\n".join(failed)


def test_perf_produce_and_consume_against_dev(venv: Venv, dev: Dev) -> None:
    produced = json.loads(_check(venv.run(
        venv.kraftpy, "perf", "produce", "--bootstrap-server", dev.bootstrap, "--topic", "perf",
        "--num-records", "20000", "--record-size", "100", "--compression", "lz4", "--json")).stdout)
    assert produced["records"] == 20000 and produced["errors"] == 0
    consumed = json.loads(_check(venv.run(
        venv.kraftpy, "perf", "consume", "--bootstrap-server", dev.bootstrap, "--topic", "perf",
        "--messages", "20000", "--from-beginning", "--json")).stdout)
    assert consumed["records"] == 20000


def test_admin_and_console_commands_against_dev(venv: Venv, dev: Dev) -> None:
    """The admin commands (kraftpy's own client) and the console ones (librdkafka) from the installed venv."""
    server = ("--bootstrap-server", dev.bootstrap)
    _check(venv.run(venv.kraftpy, "topics", "create", "--topic", "admin", "--partitions", "2", *server))
    described = json.loads(_check(venv.run(venv.kraftpy, "topics", "describe", "--topic", "admin", "--json",
                                           *server)).stdout)
    assert described["topics"][0]["partition_count"] == 2
    lines = venv.cwd / "lines.txt"
    lines.write_text("k1:v1\nk2:v2\n")
    sent = _check(venv.run(venv.kraftpy, "console", "produce", "--topic", "admin", "--file", str(lines),
                           "--property", "parse.key=true", "--property", "key.separator=:", "--json", *server))
    assert json.loads(sent.stdout) == {"topic": "admin", "records_delivered": 2}
    read = _check(venv.run(venv.kraftpy, "console", "consume", "--topic", "admin", "--from-beginning",
                           "--max-messages", "2", "--group", "g", "--json", *server))
    assert sorted((r["key"], r["value"]) for r in map(json.loads, read.stdout.splitlines())) == [
        ("k1", "v1"), ("k2", "v2")]
    groups = _check(venv.run(venv.kraftpy, "groups", "list", *server)).stdout.splitlines()
    assert groups[0] == "GROUP\tSTATE" and "g\tEmpty" in groups[1:]
    quorum = json.loads(_check(venv.run(venv.kraftpy, "quorum", "status", "--json", *server)).stdout)
    assert quorum["leader_id"] == 1
    missing = venv.run(venv.kraftpy, "topics", "describe", "--topic", "missing", *server)
    assert missing.returncode == 1
    assert missing.stderr == "kraftpy: topic missing: UNKNOWN_TOPIC_OR_PARTITION: Topic 'missing' does not exist.\n"


def test_spark_connector_without_its_extra_is_one_line(installs: dict[str, Future[Venv]]) -> None:
    base = installs["base-wheel"].result(timeout=TIMEOUT)
    done = _check(base.run(base.python, "-c", """
import kraftpy.spark
try:
    kraftpy.spark.register(None)
except ModuleNotFoundError as exc:
    print(exc)
else:
    raise SystemExit("register() without pyspark did not fail")
"""))
    assert done.stdout.strip().splitlines() == [
        "the kraftpy Spark connector needs pyspark, pyarrow, pandas, which this Python does not have: "
        "pip install 'kraftpy[spark]'"]


def doc_block(text: str, heading: str) -> str:
    """The first ```python block after ``heading`` in a markdown page."""
    start = text.index(f"\n{heading}\n")
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert match is not None, f"no python block after {heading}"
    return match.group(1)


def produce_clicks(bootstrap: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("clicks", 2, 1)])["clicks"].result(60)
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, count in ((0, 600), (1, 200)):
        for i in range(count):
            producer.produce("clicks", key=b"user-%d" % (i % 10), value=b"click-%d-%d" % (partition, i),
                             partition=partition, headers=[("page", b"/p%d" % (i % 3))])
    assert producer.flush(60) == 0


def test_spark_batch_example_of_the_docs(installs: dict[str, Future[Venv]], packaging_dir: Path) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("java is not installed (Spark needs Java 17 or later)")
    spark_venv = installs["spark-wheel"].result(timeout=TIMEOUT)
    page = (ROOT / "docs" / "spark.md").read_text()
    example = doc_block(page, "## Register") + doc_block(page, "## Batch read")
    server = Dev(spark_venv, packaging_dir / "spark-example-dev")
    try:
        produce_clicks(server.bootstrap)
        script = spark_venv.cwd / "batch_example.py"
        # The page's code as it stands, on this cluster's port; then what it read is counted.
        script.write_text(example.replace("127.0.0.1:9092", server.bootstrap)
                          + '\nprint("rows read:", df.count())\nspark.stop()\n')
        # As docs/spark.md says: the workers run the venv's interpreter.
        done = _check(spark_venv.run(spark_venv.python, str(script), PYSPARK_PYTHON=spark_venv.python,
                                     SPARK_LOCAL_IP="127.0.0.1"))
    finally:
        server.stop()
    # endingOffsets in the example stops partition 0 at 500; partition 1 is read to its end.
    assert "rows read: 700" in done.stdout, done.stdout + done.stderr
    assert "click-0-0" in done.stdout  # what .show() printed


def test_the_testing_example_suite_runs_on_the_installed_wheel(installs: dict[str, Future[Venv]]) -> None:
    """The example application of examples/testing and its tests (kraftpy_cluster, kraftpy_topic;
    confluent-kafka, kafka-python and aiokafka; a consumer group, a transactional producer, a broker
    restart) in a venv of the wheel with its testing extra, pytest and the clients, nothing else."""
    venv = installs[EXAMPLE_VENV].result(timeout=TIMEOUT)
    example = venv.cwd / "example"
    shutil.copytree(ROOT / "examples" / "testing", example,
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    installed = json.loads(_check(venv.run(venv.python, "-c", """
import importlib.metadata as md, json, kraftpy.testing.plugin as plugin
print(json.dumps({"plugin": plugin.__file__,
                  "names": sorted(d.metadata["Name"].lower().replace("_", "-") for d in md.distributions())}))
""")).stdout)
    assert Path(installed["plugin"]).is_relative_to(venv.path), installed["plugin"]
    assert {"kraftpy", "pytest", *EXAMPLE_CLIENTS} <= set(installed["names"])
    assert not {"pytest-trio", "pytest-xdist", "hypothesis", "ruff"} & set(installed["names"])
    done = venv.run(venv.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(example))
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert re.search(r"\b5 passed\b", done.stdout), done.stdout[-2000:]
