"""AlterUserScramCredentials in the controller (Kafka's ScramControlManager), as a pure function.

The request carries, per user and mechanism, either a deletion or an upsertion (the salt and the
SaltedPassword the client computed, never the password). The controller turns an upsertion into
UserScramCredentialRecord (StoredKey and ServerKey derived from the SaltedPassword) and a deletion
into RemoveUserScramCredentialRecord. Each user named gets one result; a user with any refused
alteration gets none of its alterations written, with Kafka's errors and messages:

* an empty user name: UNACCEPTABLE_CREDENTIAL "Username must not be empty";
* a mechanism other than 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512): UNSUPPORTED_SASL_MECHANISM;
* iterations outside 4096..16384: UNACCEPTABLE_CREDENTIAL "Too few/many iterations";
* the same user and mechanism twice in one request: DUPLICATE_RESOURCE;
* deleting a credential that does not exist: RESOURCE_NOT_FOUND;
* any alteration while the cluster's metadata.version is below 3.5-IV2 (kraftpy.metadata.metadata_version):
  UNSUPPORTED_VERSION "The current metadata.version does not support SCRAM" (raise it with UpdateFeatures).
"""

from __future__ import annotations

from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import MetadataImage
from kraftpy.metadata.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from kraftpy.metadata.metadata_version import scram_supported
from kraftpy.metadata.records import (
    MetadataRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from kraftpy.metadata.result import ControllerResult
from kraftpy.security.scram import MAX_ITERATIONS, MECHANISM_NAMES, MIN_ITERATIONS, ScramCredential

_Error = tuple[int, str]


def _mechanism_error(name: str, mechanism: int) -> _Error | None:
    if not name:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISM_NAMES:
        return Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def alter_user_scram_credentials(
    image: MetadataImage, request: AlterUserScramCredentialsRequest
) -> ControllerResult[AlterUserScramCredentialsResponse]:
    errors: dict[str, _Error] = {}
    seen: set[tuple[str, int]] = set()
    order: list[str] = []
    records: dict[str, list[MetadataRecord]] = {}

    def fail(name: str, error: _Error) -> None:
        errors.setdefault(name, error)

    level = image.features.metadata_version
    if level and not scram_supported(level):  # an image without metadata.version is one not bootstrapped yet
        for alteration in (*request.deletions, *request.upsertions):
            if alteration.name not in records:
                order.append(alteration.name)
                records[alteration.name] = []
            fail(alteration.name, (Errors.UNSUPPORTED_VERSION, "The current metadata.version does not support SCRAM"))

    def first_time(name: str, mechanism: int) -> bool:
        if name not in records:
            order.append(name)
            records[name] = []
        if (name, mechanism) in seen:
            fail(name, (Errors.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"))
            return False
        seen.add((name, mechanism))
        return True

    for deletion in request.deletions:
        if not first_time(deletion.name, deletion.mechanism):
            continue
        error = _mechanism_error(deletion.name, deletion.mechanism)
        if error is None and image.scram.credential(deletion.name, deletion.mechanism) is None:
            error = Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
        if error is not None:
            fail(deletion.name, error)
        else:
            records[deletion.name].append(RemoveUserScramCredentialRecord(deletion.name, deletion.mechanism))
    for upsertion in request.upsertions:
        if not first_time(upsertion.name, upsertion.mechanism):
            continue
        error = _mechanism_error(upsertion.name, upsertion.mechanism)
        if error is None and upsertion.iterations < MIN_ITERATIONS:
            error = Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        elif error is None and upsertion.iterations > MAX_ITERATIONS:
            error = Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
        elif error is None and (not upsertion.salt or not upsertion.salted_password):
            error = Errors.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
        if error is not None:
            fail(upsertion.name, error)
            continue
        credential = ScramCredential.from_salted_password(
            MECHANISM_NAMES[upsertion.mechanism], upsertion.salt, upsertion.salted_password, upsertion.iterations)
        records[upsertion.name].append(UserScramCredentialRecord(
            name=upsertion.name, mechanism=upsertion.mechanism, salt=credential.salt,
            stored_key=credential.stored_key, server_key=credential.server_key, iterations=upsertion.iterations))
    out: list[MetadataRecord] = []
    results = []
    for name in order:
        error = errors.get(name)
        if error is None:
            out += records[name]
            results.append(AlterUserScramCredentialsResult(name, Errors.NONE))
        else:
            results.append(AlterUserScramCredentialsResult(name, error[0], error[1]))
    return ControllerResult(out, AlterUserScramCredentialsResponse(tuple(results)))
