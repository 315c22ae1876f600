"""`vllm_url` listing several servers: prompts dealt over them, groups back in order, every server gets each
update. Two fake OpenAI-compatible servers in-process (the endpoints `VLLMServerEngine` uses); no vLLM."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from workbench.config import Config
from workbench.rollout import vllm
from workbench.rollout.vllm_pool import VLLMServerPool, deal, server_urls


class FakeServer:
    """Answers /v1/models, /v1/load_lora_adapter, /v1/unload_lora_adapter, /v1/completions; records them.
    A completion's tokens are [server index, first prompt token, sample index], so the test sees who answered."""

    def __init__(self, index: int) -> None:
        self.index, self.requests = index, []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send({"data": [{"id": "base"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((self.path, body))
                if self.path != "/v1/completions":
                    return self._send("ok")
                choices = []
                for p, prompt in enumerate(body["prompt"]):
                    for s in range(body["n"]):
                        ids = [fake.index, prompt[0], s]
                        choices.append(
                            {
                                "index": p * body["n"] + s,
                                "text": "x",
                                "finish_reason": "stop",
                                "logprobs": {
                                    "tokens": [f"token_id:{t}" for t in ids],
                                    "token_logprobs": [-0.5] * 3,
                                },
                            }
                        )
                self._send({"choices": choices})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def paths(self, path: str) -> list[dict]:
        return [b for p, b in self.requests if p == path]


class FakePolicy:
    adapter = "lora"
    eos_token_ids = [2]

    def save_adapter(self, path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        (path / "adapter_config.json").write_text("{}")
        return path


@pytest.fixture
def servers():
    made = [FakeServer(i) for i in range(2)]
    yield made
    for s in made:
        s.httpd.shutdown()
        s.httpd.server_close()


def test_urls_and_dealing() -> None:
    assert server_urls("http://a:1, http://b:2") == ["http://a:1", "http://b:2"]
    assert server_urls(["http://a:1"]) == ["http://a:1"]
    assert deal(5, 2) == [[0, 2, 4], [1, 3]]
    assert deal(1, 3) == [[0], [], []]


def test_pool_spreads_groups_and_updates_every_server(servers, tmp_path: Path) -> None:
    cfg = Config(rollout="vllm_server", vllm_url=[s.url for s in servers])
    pool = vllm.make(cfg, FakePolicy(), work_dir=tmp_path)
    assert isinstance(pool, VLLMServerPool)
    for s in servers:  # the first adapter is loaded on every server at start
        assert [b["lora_name"] for b in s.paths("/v1/load_lora_adapter")] == ["policy-1"]
    prompts = [[10 + i, 7] for i in range(5)]
    seen: list[int] = []
    groups = pool.generate(prompts, 3, max_new_tokens=4, temperature=1.0, on_tokens=seen.append)
    assert len(groups) == 5 and seen == [4]
    for i, group in enumerate(groups):  # in the prompts' order, each group whole on server i % 2
        assert [c.token_ids for c in group] == [[i % 2, 10 + i, s] for s in range(3)]
        assert all(c.prompt_token_ids == prompts[i] for c in group)
    assert [len(b["prompt"]) for b in servers[0].paths("/v1/completions")] == [3]
    assert [len(b["prompt"]) for b in servers[1].paths("/v1/completions")] == [2]
    pool.update_weights(FakePolicy())
    for s in servers:  # each server loads the new adapter, then drops the old one
        assert [b["lora_name"] for b in s.paths("/v1/load_lora_adapter")] == ["policy-1", "policy-2"]
        assert [b["lora_name"] for b in s.paths("/v1/unload_lora_adapter")] == ["policy-1"]
        assert s.paths("/v1/completions")[-1]["model"] == "policy-1"
    groups = pool.generate(prompts[:1], 2, max_new_tokens=4, temperature=1.0)
    assert servers[0].paths("/v1/completions")[-1]["model"] == "policy-2"
    pool.close()
