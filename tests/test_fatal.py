"""kraftpy.fatal: the one line a fatal fault prints, found wherever the nursery tree put it."""

from __future__ import annotations

import errno

import pytest
import trio

from kraftpy.fatal import FatalError, ListenerError, binding, fatal_message, storage_failure


def enospc(filename: str | None = None) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", filename)


def test_a_storage_failure_names_what_where_and_the_errno():
    error = storage_failure("cannot write the metadata log in", "/data/__cluster_metadata-0", enospc())
    assert str(error) == ("cannot write the metadata log in /data/__cluster_metadata-0: "
                          "No space left on device (ENOSPC)")


async def test_the_fatal_error_is_found_among_the_cancellations_of_a_nursery_tree():
    async def fails() -> None:
        await trio.lowlevel.checkpoint()
        raise storage_failure("cannot write", "/d/quorum-state", enospc())

    async def cleanup_fails_too() -> None:
        try:
            await trio.sleep_forever()
        finally:
            raise RuntimeError("closing failed while cancelled")  # raised with the cancellation as context

    with pytest.raises(BaseExceptionGroup) as info:
        async with trio.open_nursery() as outer:
            outer.start_soon(trio.sleep_forever)
            async with trio.open_nursery() as inner:
                inner.start_soon(cleanup_fails_too)
                inner.start_soon(fails)
    assert fatal_message(info.value) == "cannot write /d/quorum-state: No space left on device (ENOSPC)"


def test_a_fatal_error_in_the_context_of_a_cleanup_error_is_found():
    try:
        try:
            raise FatalError("the first fault")
        finally:
            raise ValueError("a cleanup that failed")  # noqa: B012 - the point of the test
    except ValueError as exc:
        assert fatal_message(exc) == "the first fault"


def test_an_unwrapped_storage_error_is_said_with_its_file():
    group = BaseExceptionGroup("tasks", [trio.Cancelled._create(), enospc("/data/t-0/00000000000000000000.log")])
    assert fatal_message(group) == "/data/t-0/00000000000000000000.log: No space left on device (ENOSPC)"


def test_a_bug_is_not_a_fatal_fault():
    assert fatal_message(ExceptionGroup("tasks", [KeyError("x"), ZeroDivisionError()])) is None
    assert fatal_message(OSError(errno.ECONNRESET, "Connection reset by peer")) is None


def test_a_bind_error_becomes_a_listener_error_naming_the_setting():
    with pytest.raises(ListenerError) as info, binding("127.0.0.1", 9092, "listeners=PLAINTEXT://127.0.0.1:9092"):
        raise ExceptionGroup("serve", [OSError(errno.EADDRINUSE, "Address already in use")])
    assert str(info.value) == ("cannot listen on 127.0.0.1:9092: Address already in use (EADDRINUSE) "
                               "(listeners=PLAINTEXT://127.0.0.1:9092)")


def test_a_file_error_in_a_binding_block_is_not_a_bind_error():
    with pytest.raises(PermissionError), binding("127.0.0.1", 9092, "listeners=..."):
        raise PermissionError(errno.EACCES, "Permission denied", "/data/meta.properties")
