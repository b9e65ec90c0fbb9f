"""`KafkaApis`: one frame in, the response frame's parts out, through a table of handlers.

`KafkaApis.handle` is the `KafkaServer` handler. It parses the frame (``parse_request``), finds
the handler for the api key, awaits it and encodes the response. A frame that does not parse, an
API this broker does not serve, or a handler that fails closes that one connection (`BadRequest`),
as Kafka does; every other connection is unaffected. Answered instead of closed:

* an ApiVersions request of an unknown version gets a v0 response with UNSUPPORTED_VERSION and
  the supported ranges (KIP-511), and ApiVersions itself is answered here, from the table;
* a Produce below v3 gets UNSUPPORTED_VERSION for each partition;
* a forwarded request that no controller took gets its own shape with every item failed
  (kraftpy.broker.apis.forwarding).

Each area's handlers live in a module of their own and are registered by the broker that builds
them (`register` / `register_all`), so an area added later (the group coordinator's, say) plugs
in the same way.

Large requests: a frame of `LARGE_REQUEST_BYTES` or more (Produce aside: its bytes are records,
decoded as slices of the frame) is decoded in a worker thread, and its response encoded there too. A
Metadata request naming a million topics takes seconds of Python to decode; in a worker thread the
event loop keeps serving other connections meanwhile (the thread gives the interpreter up every
switch interval). At most `LARGE_REQUEST_THREADS` such decodes run at once. Handlers walk what a
request names in turns (kraftpy.broker.apis.pacing).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
import trio

from kraftpy.broker.apis.forwarding import error_response
from kraftpy.broker.controller_channel import ControllerUnavailable
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.metadata.controller_config import DEFAULT_SUPPORTED_FEATURES
from kraftpy.protocol.api_keys import API_VERSIONS, ApiKey, VersionRange
from kraftpy.protocol.errors import ErrorCode, InvalidRequestError, UnsupportedVersionError
from kraftpy.protocol.frames import encode_response, parse_request
from kraftpy.protocol.messages import REQUESTS, ApiVersionsResponse, ProduceResponse
from kraftpy.protocol.messages.api_versions import supported_feature_keys
from kraftpy.protocol.schema import EncodeError
from kraftpy.rpc.kafka_server import BadRequest, Connection

_logger = structlog.get_logger(__name__)

Handler = Callable[[Any, Any, Connection], Awaitable[Any]]

#: Request frames at least this large (Produce aside) are decoded and answered off the event loop.
LARGE_REQUEST_BYTES = 256 * 1024
#: Worker threads decoding or encoding large requests at once: more would only share the interpreter.
LARGE_REQUEST_THREADS = 1


def _parse(frame: bytes | memoryview) -> tuple[Any, Any]:
    return parse_request(frame, allow_trailing_bytes=True)


def _is_large(frame: bytes | memoryview) -> bool:
    return len(frame) >= LARGE_REQUEST_BYTES and int.from_bytes(frame[:2], "big", signed=True) != ApiKey.PRODUCE


class KafkaApis:
    def __init__(self, metadata: MetadataCache, *, node_id: int = -1, ready: trio.Event | None = None) -> None:
        """``ready``: requests wait for it (the broker's first catch-up with the metadata log)."""
        self.metadata = metadata
        self.ready = ready
        self._log = _logger.bind(node_id=node_id)
        self.handlers: dict[int, Handler] = {ApiKey.API_VERSIONS: self.handle_api_versions}
        #: What ApiVersions answers, kept between requests: (the served API keys, the list of their
        #: ranges); the supported features by answer version; (the image, its finalized features).
        self._api_versions: tuple[tuple[int, ...], list] | None = None
        self._supported_features: dict[int, list] = {}
        self._finalized_features: tuple[Any, list] = (None, [])
        self._large_requests = trio.CapacityLimiter(LARGE_REQUEST_THREADS)
        #: Client quotas (kraftpy.broker.quotas.ClientQuotas): told what each answered request cost;
        #: they set its throttle time and mute its connection when its client is over a quota.
        self.quotas: Any = None
        #: Sees every frame first (``admit(frame, conn)``): the SASL authentication gate
        #: (kraftpy.broker.apis.sasl). It returns parts to send instead, or None to go on.
        self.gate: Any = None

    def register(self, api_key: ApiKey, handler: Handler) -> None:
        """Serve ``api_key`` with ``handler``."""
        self.handlers[api_key] = handler

    def register_all(self, handlers: Mapping[ApiKey, Handler]) -> None:
        for api_key, handler in handlers.items():
            self.register(api_key, handler)

    def supported_versions(self) -> list[tuple[int, int, int]]:
        return sorted((int(k), r.min_version, r.max_version) for k, r in API_VERSIONS.items() if k in self.handlers)

    # -- dispatch ---------------------------------------------------------------------------------

    async def handle(self, frame: bytes | memoryview, conn: Connection) -> list | None:
        if self.ready is not None and not self.ready.is_set():
            await self.ready.wait()
        if self.gate is not None:
            answer = await self.gate.admit(frame, conn)
            if answer is not None:
                return answer
        large = _is_large(frame)
        try:
            if large:
                header, request = await trio.to_thread.run_sync(_parse, frame, limiter=self._large_requests)
            else:
                header, request = _parse(frame)
        except UnsupportedVersionError as exc:
            return self._answer_unsupported_version(frame, exc)
        except InvalidRequestError as exc:
            raise BadRequest(str(exc)) from None
        api_key = header.request_api_key
        version = header.request_api_version
        handler = self.handlers.get(api_key)
        if handler is None:
            raise BadRequest(f"{ApiKey(api_key).name} is not served by this broker")
        try:
            response = await handler(header, request, conn)
        except BadRequest:
            raise
        except ControllerUnavailable as exc:
            response = error_response(api_key, version, request, str(exc))
            if response is None:
                raise BadRequest(f"{ApiKey(api_key).name} failed: {exc}") from exc
            self._log.warning("no controller for a forwarded request", api=ApiKey(api_key).name, error=str(exc))
        except Exception as exc:
            self._log.exception("request handler failed", api=ApiKey(api_key).name, peer=conn.peer)
            raise BadRequest(f"{ApiKey(api_key).name} failed: {exc}") from exc
        if self.quotas is not None:
            self.quotas.after_request(api_key, header, request, len(frame), response, conn)
        del request
        if response is None:
            return None
        try:
            if large:
                return await trio.to_thread.run_sync(encode_response, header.correlation_id, api_key, version,
                                                     response, limiter=self._large_requests)
            return encode_response(header.correlation_id, api_key, version, response)
        except EncodeError as exc:
            # An answer this version cannot carry (an echoed name past a string's limit): only this
            # connection suffers.
            self._log.warning("response cannot be encoded", api=ApiKey(api_key).name, version=version,
                              peer=conn.peer, error=str(exc))
            raise BadRequest(f"{ApiKey(api_key).name} v{version} response cannot be encoded: {exc}") from None

    def _answer_unsupported_version(self, frame: bytes | memoryview, exc: UnsupportedVersionError) -> list:
        if exc.api_key == ApiKey.API_VERSIONS and exc.correlation_id is not None:
            response = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=self._api_version_list())
            return encode_response(exc.correlation_id, ApiKey.API_VERSIONS, 0, response)
        cls = REQUESTS.get(exc.api_key) if exc.api_key is not None else None
        if exc.api_key == ApiKey.PRODUCE and cls is not None and exc.api_version in cls.SCHEMA.versions:
            # Produce v0-v2 parse (the schema knows them) but are refused, per partition.
            every_known = {ApiKey.PRODUCE: VersionRange(cls.SCHEMA.versions.lo, cls.SCHEMA.versions.hi)}
            try:
                _, request = parse_request(frame, every_known, allow_trailing_bytes=True)
            except InvalidRequestError as decode_exc:
                raise BadRequest(str(exc)) from decode_exc
            if request.acks == 0:
                raise BadRequest(str(exc))
            response = ProduceResponse(responses=[
                ProduceResponse.TopicProduceResponse(name=t.name, partition_responses=[
                    ProduceResponse.PartitionProduceResponse(
                        index=p.index, error_code=ErrorCode.UNSUPPORTED_VERSION, base_offset=-1)
                    for p in t.partition_data])
                for t in request.topic_data])
            return encode_response(exc.correlation_id, ApiKey.PRODUCE, exc.api_version, response)
        raise BadRequest(str(exc))

    # -- ApiVersions ------------------------------------------------------------------------------

    def _api_version_list(self) -> list:
        """The served APIs and their version ranges, as an answer lists them: built again only when the
        served APIs changed (every client asks once a connection, and building it was most of the cost
        of answering)."""
        served = tuple(self.handlers)
        if self._api_versions is None or self._api_versions[0] != served:
            self._api_versions = (served, [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                                           for k, lo, hi in self.supported_versions()])
        return self._api_versions[1]

    def _features(self, version: int, image: Any) -> tuple[list, list]:
        """An answer of ``version``'s supported_features, and the finalized features of ``image``: the
        former by version, the latter for the image last asked about."""
        supported = self._supported_features.get(version)
        if supported is None:
            # The feature ranges this broker declared when it registered (Kafka's SupportedFeatures).
            supported = self._supported_features[version] = supported_feature_keys(DEFAULT_SUPPORTED_FEATURES,
                                                                                   version)
        if self._finalized_features[0] is not image:
            self._finalized_features = (image, [
                ApiVersionsResponse.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
                for name, level in sorted(image.finalized_features.items())
            ])
        return supported, self._finalized_features[1]

    async def handle_api_versions(self, header: Any, request: Any, conn: Connection) -> ApiVersionsResponse:
        response = ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=self._api_version_list())
        image = self.metadata.image
        response.supported_features, finalized = self._features(header.request_api_version, image)
        if finalized:
            response.finalized_features_epoch = max(image.provenance.last_offset, 0)
            response.finalized_features = finalized
        return response
