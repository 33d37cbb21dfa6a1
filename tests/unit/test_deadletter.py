import base64

from hypothesis import given
from hypothesis import strategies as st

from tally.deadletter import FAILURE_KINDS, MAX_PAYLOAD_BYTES, DeadLetter, dead_letter


@given(st.sampled_from(sorted(FAILURE_KINDS)), st.binary(max_size=MAX_PAYLOAD_BYTES * 2), st.integers(0, 2**40))
def test_dead_letters_round_trip_and_keep_recoverable_payloads(kind: str, payload: bytes, at: int) -> None:
    letter = dead_letter(component="test", kind=kind, message="m", status=422, received_at=at, payload=payload)
    again = DeadLetter.from_json(letter.to_json())
    assert again == letter
    kept = again.payload.encode() if again.payload is not None else None
    if kept is None:
        kept = base64.b64decode(again.payload_b64 or "")
    assert kept == payload[:MAX_PAYLOAD_BYTES]
    assert again.truncated is (len(payload) > MAX_PAYLOAD_BYTES)
    assert again.payload_size == len(payload)
    assert again.component["name"] == "test"
