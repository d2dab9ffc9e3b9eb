"""The AI judge's HTTP client against a real local server that serves payoff's tiny model."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("transformers", reason="the llm extra is not installed")

from payoff.core.errors import ConfigError
from payoff.models.lm import ModelConfig, load_lm
from payoff.rewards.chat_clients import JudgeError, LocalChatClient, OpenAIChatClient
from payoff.rewards.judge import Judge, load_constitution


class ChatServer(ThreadingHTTPServer):
    """An OpenAI-compatible /v1/chat/completions endpoint answering with a local model."""

    def __init__(self, client: LocalChatClient):
        super().__init__(("127.0.0.1", 0), ChatHandler)
        self.client = client
        self.requests = 0
        self.fail_next = 0  # answer this many requests with HTTP 500 first
        self.delay_next = 0.0  # sleep this long before the next answer (to trigger timeouts)
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class ChatHandler(BaseHTTPRequestHandler):
    server: ChatServer

    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_POST(self):
        with self.server.lock:
            self.server.requests += 1
            fail = self.server.fail_next > 0
            self.server.fail_next -= int(fail)
            delay, self.server.delay_next = self.server.delay_next, 0.0
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        if fail:
            self.send_error(500, "overloaded")
            return
        time.sleep(delay)
        content = self.server.client.complete(body["messages"])
        reply = json.dumps(
            {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
                "model": body["model"],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


@pytest.fixture(scope="module")
def server():
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    srv = ChatServer(LocalChatClient(model, tokenizer, name="tiny", max_new_tokens=6))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


MESSAGES = [{"role": "user", "content": "Which is better, A or B?"}]


def test_client_gets_the_served_models_reply_and_caches_it(server, tmp_path):
    client = OpenAIChatClient(server.base_url, "tiny", cache_dir=tmp_path, retries=0)
    reply = client.complete(MESSAGES)
    assert reply == server.client.complete(MESSAGES)  # the real model answered over HTTP
    before = server.requests
    assert client.complete(MESSAGES) == reply
    assert server.requests == before and client.cache_hits == 1
    fresh = OpenAIChatClient(
        server.base_url, "tiny", cache_dir=tmp_path
    )  # a new process, same disk
    assert fresh.complete(MESSAGES) == reply and fresh.calls == 0


def test_client_retries_a_server_error(server):
    server.fail_next = 2
    client = OpenAIChatClient(server.base_url, "tiny", retries=3, backoff=0.01)
    assert isinstance(client.complete(MESSAGES), str)
    assert client.calls == 3
    server.fail_next = 5
    with pytest.raises(JudgeError, match="failed 2 times; last: HTTP 500"):
        OpenAIChatClient(server.base_url, "tiny", retries=1, backoff=0.01).complete(MESSAGES)
    server.fail_next = 0


def test_client_survives_a_timeout_by_retrying(server):
    server.delay_next = 2.5  # well past the timeout, so a loaded machine cannot make it flaky
    client = OpenAIChatClient(server.base_url, "tiny", timeout=1.0, retries=1, backoff=0.01)
    assert isinstance(client.complete(MESSAGES), str)
    assert client.calls == 2
    server.delay_next = 2.5
    with pytest.raises(JudgeError, match="timed out"):
        OpenAIChatClient(server.base_url, "tiny", timeout=1.0, retries=0).complete(MESSAGES)
    time.sleep(1.7)  # let the slow handler finish before the next test


def test_client_does_not_retry_a_client_error_and_checks_its_settings(server):
    client = OpenAIChatClient(
        server.base_url.replace("/v1", "/nope"), "tiny", retries=3, backoff=0.01
    )
    with pytest.raises(JudgeError, match="HTTP 404"):
        client.complete(MESSAGES)
    assert client.calls == 1
    with pytest.raises(ConfigError, match="PAYOFF_TEST_MISSING_KEY"):
        OpenAIChatClient(server.base_url, "tiny", api_key_env="PAYOFF_TEST_MISSING_KEY")
    with pytest.raises(ConfigError, match="http"):
        OpenAIChatClient("127.0.0.1:8000", "tiny")


class Scripted:
    """A chat client that answers from a fixed list (to test verdict parsing only)."""

    model = "scripted"

    def __init__(self, replies):
        self.replies = list(replies)
        self.seen = []

    def complete(self, messages):
        self.seen.append(messages)
        return self.replies.pop(0)


def test_judge_turns_verdicts_into_labels_and_scores(tmp_path):
    yaml_file = tmp_path / "constitution.yaml"
    yaml_file.write_text("principles:\n  - Be correct.\n  - Be brief; no flattery.\n")
    md_file = tmp_path / "constitution.md"
    md_file.write_text("# Our principles\n\n- Be correct.\n* Be brief; no flattery.\n")
    principles = load_constitution(yaml_file)
    assert principles == load_constitution(md_file) == ["Be correct.", "Be brief; no flattery."]
    client = Scripted(
        [
            "B is plainer.\nPREFERRED: B",
            "PREFERRED: A",
            "Answer A.",  # not the stated format: retried once, then no verdict
            "no idea",
            "SCORE: 7",
            "Right and brief.\nSCORE: 10",
        ]
    )
    judge = Judge(client, principles, retries=1)
    assert judge.label("3+4=", "Great! 7", "7") == {
        "prompt": "3+4=",
        "chosen": "7",
        "rejected": "Great! 7",
    }
    assert judge.prefer("3+4=", "7", "8") == 0
    assert judge.prefer("3+4=", "7", "8") is None
    assert judge.counts["unparsable"] == 2 and judge.counts["failed"] == 1
    assert judge(["3+4=", "3+4="], ["7", "7"]) == [0.7, 1.0]
    assert "Be brief; no flattery." in client.seen[0][0]["content"]
    assert "PREFERRED: A" in client.seen[0][0]["content"]
    assert "SCORE: n" in client.seen[-1][0]["content"]


def test_judge_over_a_local_model_answers_or_counts_the_reply_it_cannot_read():
    """LocalChatClient still works as a judge: a tiny model's reply has no verdict line,
    which is counted and skipped, never a crash or a made-up score."""
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    client = LocalChatClient(model, tokenizer, name="tiny")
    assert client.max_new_tokens >= 16  # room for reasons and the 'SCORE: n' line
    client.max_new_tokens = 8  # keep the test fast
    judge = Judge(client, ["Be correct."], retries=0)
    score = judge.score("3+4=", "7")
    assert score is None or 0.0 <= score <= 1.0
    assert judge.counts["scored"] + judge.counts["failed"] == 1
