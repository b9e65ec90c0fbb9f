"""Command line of the fuzzer: ``run``, ``replay`` and ``show`` (see the package docstring).

Exit status: 0 when the campaign found nothing that fails it, 1 when it did, 2 when the harness
itself could not run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import traceback
from pathlib import Path

import trio

from tests.fuzz.campaign import Campaign, CampaignConfig, make_frame, run_campaign
from tests.fuzz.known_bugs import OPEN
from tests.fuzz.replay import load, replay_finding
from tests.fuzz.target import DevTarget


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="a campaign of many frames against a fresh kraftpy dev")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--frames", type=int, default=10_000)
    run.add_argument("--first", type=int, default=0, help="number of the first frame")
    run.add_argument("--workers", type=int, default=4, help="connections sending at once")
    run.add_argument("--control-share", type=float, default=0.2, help="share of frames for the control port")
    run.add_argument("--hang-bound", type=float, default=10.0, help="seconds without answer nor close = a hang")
    run.add_argument("--class", dest="classes", action="append", help="only this mutation class (repeatable)")
    run.add_argument("--skip-known", action="store_true", help="leave out inputs of the open known bugs")
    run.add_argument("--dir", type=Path, help="the target's directory (default: a new temporary one)")
    run.add_argument("--out", type=Path, help="write the JSON report here")
    replay = sub.add_parser("replay", help="send given frames of a seed again, on a fresh kraftpy dev")
    replay.add_argument("--seed", type=int, required=True)
    replay.add_argument("--frame", type=int, action="append", required=True)
    replay.add_argument("--control-share", type=float, default=0.2)
    replay.add_argument("--settle", type=float, default=3.0, help="seconds to wait for a late crash")
    replay.add_argument("--out", type=Path)
    show = sub.add_parser("show", help="print frames as a fresh target would get them, without sending them")
    show.add_argument("--seed", type=int, required=True)
    show.add_argument("--frame", type=int, action="append", required=True)
    show.add_argument("--control-share", type=float, default=0.2)
    finding = sub.add_parser("finding", help="replay a reproducer of tests/fuzz/findings/ on a fresh target")
    finding.add_argument("path", type=Path, nargs="+")
    hs = sub.add_parser("handshakes", help="SASL and TLS handshake attempts against a fresh secured kraftpy dev")
    hs.add_argument("--seed", type=int, default=1)
    hs.add_argument("--attempts", type=int, default=10_000)
    hs.add_argument("--first", type=int, default=0, help="number of the first attempt")
    hs.add_argument("--workers", type=int, default=16, help="connections at once")
    hs.add_argument("--hang-bound", type=float, default=10.0, help="seconds without answer nor close = a hang")
    hs.add_argument("--class", dest="classes", action="append", help="only this class or family (repeatable)")
    hs.add_argument("--dir", type=Path, help="the target's directory (default: a new temporary one)")
    hs.add_argument("--out", type=Path, help="write the JSON report here")
    bisect = sub.add_parser("bisect", help="replay each given frame alone, each on a fresh target: which fail?")
    bisect.add_argument("--seed", type=int, required=True)
    bisect.add_argument("--frame", type=int, action="append", required=True)
    bisect.add_argument("--control-share", type=float, default=0.2)
    bisect.add_argument("--settle", type=float, default=2.0)
    return parser


async def _show(seed: int, indexes: list[int], control_share: float) -> None:
    """Set a fresh target up (the pools depend on what it serves and the ids it gives), print the frames."""
    campaign = Campaign(CampaignConfig(seed=seed, frames=0))
    async with trio.open_nursery() as nursery:
        campaign.target = DevTarget(Path(tempfile.mkdtemp(prefix="kraftpy-fuzz-show-")))
        await campaign.target.start(nursery)
        try:
            await campaign.setup(nursery)
        finally:
            await campaign.target.stop()
        nursery.cancel_scope.cancel()
    for index in indexes:
        frame = make_frame(seed, index, campaign.pools, control_share, campaign.config.controller_kafka_share)
        print(f"frame {index}: {frame.port} {frame.api} {frame.klass}: {frame.detail}")
        print(f"  tags {sorted(frame.tags)}")
        print(f"  {len(frame.data)} bytes: {frame.data[:256].hex()}{'...' if len(frame.data) > 256 else ''}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "show":
        trio.run(_show, args.seed, args.frame, args.control_share)
        return 0
    if args.command == "finding":
        status = 0
        for path in args.path:
            failures = trio.run(replay_finding, load(path))
            print(f"{path}: {'holds' if not failures else 'FAILS'}")
            for line in failures:
                print(f"  {line[:500]}")
            status |= bool(failures)
        return status
    if args.command == "bisect":
        failing = []
        for index in args.frame:
            config = CampaignConfig(seed=args.seed, frames=1, indexes=(index,), workers=1,
                                    control_share=args.control_share, settle=args.settle, restart_on_crash=False)
            report = trio.run(run_campaign, config)
            kinds = sorted({f.kind for f in report.failures()})
            print(f"frame {index}: {', '.join(kinds) or 'ok'}", flush=True)
            if kinds:
                failing.append(index)
        print(f"failing alone: {failing}")
        return 1 if failing else 0
    if args.command == "handshakes":
        from tests.fuzz.handshake_campaign import HandshakeConfig, run_handshake_campaign

        hs_config = HandshakeConfig(seed=args.seed, frames=args.attempts, first=args.first, workers=args.workers,
                                    hang_bound=args.hang_bound, directory=args.dir, out=args.out, progress=print,
                                    classes=frozenset(args.classes) if args.classes else None)
        try:
            report = trio.run(run_handshake_campaign, hs_config)
        except Exception:
            traceback.print_exc()
            return 2
        print(report.summary())
        if hs_config.out is not None:
            print(f"report written to {hs_config.out}")
        return 0 if not report.failures() else 1
    if args.command == "replay":
        config = CampaignConfig(seed=args.seed, frames=len(args.frame), indexes=tuple(args.frame), workers=1,
                                control_share=args.control_share, settle=args.settle, out=args.out,
                                restart_on_crash=False, progress=print)
    else:
        config = CampaignConfig(seed=args.seed, frames=args.frames, first=args.first, workers=args.workers,
                                control_share=args.control_share, hang_bound=args.hang_bound,
                                skip=OPEN if args.skip_known else (), directory=args.dir, out=args.out,
                                classes=frozenset(args.classes) if args.classes else None, progress=print)
    try:
        report = trio.run(run_campaign, config)
    except Exception:
        traceback.print_exc()
        return 2
    print(report.summary())
    if config.out is not None:
        print(f"report written to {config.out}")
    return 0 if not report.failures() else 1


if __name__ == "__main__":
    sys.exit(main())
