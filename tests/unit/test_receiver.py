from app.receiver import TokenGuard


def headers(timer_id: str, token: str) -> list[tuple[str, bytes]]:
    return [("timer-id", timer_id.encode()), ("timer-token", token.encode()), ("x", b"1")]


def test_current_token_is_accepted_once() -> None:
    guard = TokenGuard()
    guard.expect("t1", "a")
    assert guard.accept(headers("t1", "a"))
    assert not guard.accept(headers("t1", "a")), "a duplicate delivery is refused"


def test_superseded_and_forgotten_tokens_are_refused() -> None:
    guard = TokenGuard()
    guard.expect("t1", "a")
    guard.expect("t1", "b")  # rescheduled
    assert not guard.accept(headers("t1", "a"))
    guard.forget("t1")
    assert not guard.accept(headers("t1", "b"))


def test_records_without_timer_headers_are_refused() -> None:
    guard = TokenGuard({"t1": "a"})
    assert not guard.accept(None)
    assert not guard.accept([("timer-id", b"t1")])
    assert guard.is_current("t1", "a")
