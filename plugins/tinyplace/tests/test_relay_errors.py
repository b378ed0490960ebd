"""The mapping of relay answers onto sent / failed / uncertain, for cases no fault produces."""

from __future__ import annotations

import pytest
from backchannel.errors import RateLimited, Rejected, Uncertain
from backchannel_tinyplace.relay_errors import (
    error_code,
    not_a_contact,
    retry_after_of,
    send_error,
)
from tinyplace import TinyPlaceError


def test_a_refused_signature_is_rejected_and_points_at_identity_and_clock() -> None:
    failure = send_error(TinyPlaceError(401, {"error": "stale_signature"}), "PEER")
    assert isinstance(failure, Rejected)
    assert "HTTP 401 stale_signature" in failure.reason and "clock" in failure.reason


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (400, {"error": "invalid_envelope"}, Rejected),
        (404, "not found", Rejected),
        (403, {"errors": {"code": "not_a_contact", "detail": "x"}}, Rejected),
        (403, {"error": "You can only message your contacts", "code": "NOT_A_CONTACT"}, Rejected),
        (502, "<html>bad gateway</html>", Uncertain),
        (429, {"retryAfter": 7}, RateLimited),
    ],
)
def test_status_codes_map_to_outcomes(status: int, body: object, kind: type) -> None:
    assert isinstance(send_error(TinyPlaceError(status, body), "PEER"), kind)


@pytest.mark.parametrize(
    "body",
    [
        {"error": "You can only message your contacts", "code": "not_a_contact"},
        {"error": "Not a contact", "code": "NOT_A_CONTACT"},
        {"errors": {"code": "not_a_contact", "detail": "x"}},
        {"error": "not_a_contact"},
    ],
)
def test_not_a_contact_in_every_error_shape_advises_pairing(body: object) -> None:
    failure = send_error(TinyPlaceError(403, body), "PEER")
    assert "backchannel tinyplace pair PEER" in failure.reason


def test_a_refused_send_and_a_first_send_check_give_one_pairing_advice() -> None:
    refused = send_error(TinyPlaceError(403, {"code": "not_a_contact"}), "PEER")
    checked = not_a_contact("PEER")
    assert refused.reason == (
        "PEER is not an accepted contact of this agent, so the relay refused the message;"
        " pair first: backchannel tinyplace pair PEER"
    )
    assert checked.reason == (
        "PEER is not an accepted contact: pair first: backchannel tinyplace pair PEER"
    )


def test_a_human_message_is_not_taken_for_a_code() -> None:
    assert error_code({"error": "Directory auth required", "code": "DIRECTORY_AUTH_REQUIRED"}) == (
        "DIRECTORY_AUTH_REQUIRED"
    )
    assert error_code({"error": "Unauthorized"}) == "Unauthorized"
    assert error_code({"error": "Invalid signature"}) is None


def test_retry_after_prefers_the_header_then_the_body() -> None:
    both = TinyPlaceError(429, {"retry_after": 9}, headers={"Retry-After": "3"})
    assert retry_after_of(both) == 3.0
    assert retry_after_of(TinyPlaceError(429, {"retry_after": 9})) == 9.0
    assert retry_after_of(TinyPlaceError(429, "slow down")) == 1.0
    assert error_code({"error": {"code": "x"}}) == "x"
