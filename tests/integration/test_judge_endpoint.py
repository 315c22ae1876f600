"""The judge verifier over an OpenAI-compatible endpoint: a fake chat-completions server on the loopback."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from workbench.config import config_from_dict
from workbench.types import Output, Task
from workbench.verifiers.judge import JudgeVerifier

TASK = Task("t", "Book Ana on Monday at 09:00.", "calendar.create_event", {"attendee": "Ana"})
REPLY = Output('{"tool": "calendar.create_event", "args": {"attendee": "Ana"}}')


class FakeOpenAI(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions with `server.reply` after `server.delay` seconds; records each request."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, body))
        time.sleep(self.server.delay)
        if self.server.status != 200:
            self.send_error(self.server.status, "overloaded")
            return
        data = json.dumps(
            {"choices": [{"message": {"role": "assistant", "content": self.server.reply}}]}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_openai() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    server.requests, server.reply, server.delay, server.status = [], "Score: 7", 0.0, 200
    server.handle_error = lambda request, address: None  # a client that timed out closed its socket: expected
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def judge(server: ThreadingHTTPServer, timeout_s: float = 5.0) -> JudgeVerifier:
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    return JudgeVerifier.from_config(
        config_from_dict({"judge_url": url, "judge_model": "big-judge", "judge_timeout_s": timeout_s})
    )


def test_the_judge_asks_the_endpoint_and_scales_its_score(fake_openai):
    score = judge(fake_openai).score(REPLY, TASK)
    assert score.error is None and score.total == 0.7 and score.parts == {"judge": 0.7}
    path, body = fake_openai.requests[0]
    assert path == "/v1/chat/completions" and body["model"] == "big-judge" and body["temperature"] == 0.0
    prompt = body["messages"][0]["content"]
    assert "Rubric:" in prompt and TASK.prompt in prompt and str(REPLY) in prompt


def test_an_unreadable_score_is_a_verifier_error(fake_openai):
    fake_openai.reply = "The reply looks fine to me."
    score = judge(fake_openai).score(REPLY, TASK)
    assert score.error == "judge output unparseable: 'The reply looks fine to me.'"


def test_a_slow_judge_is_a_timeout_error(fake_openai):
    fake_openai.delay = 1.0
    (score,) = judge(fake_openai, timeout_s=0.2).score_many([(REPLY, TASK)])
    assert score.error is not None and score.error.startswith(
        "judge timed out: no answer from http://127.0.0.1:"
    )
    assert "within 0.2 s" in score.error


def test_an_http_error_is_a_verifier_error(fake_openai):
    fake_openai.status = 503
    score = judge(fake_openai).score(REPLY, TASK)
    assert score.error is not None and "answered HTTP 503" in score.error


def test_no_endpoint_is_an_error_naming_the_key():
    with pytest.raises(ValueError, match="judge_url: set it"):
        JudgeVerifier.from_config(config_from_dict({}))
