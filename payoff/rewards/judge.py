"""An AI judge with a constitution (RLAIF): principles + a judge model -> preference labels or scores.

    constitution = load_constitution("principles.yaml")     # or .md: one principle per bullet
    judge = Judge(OpenAIChatClient(base_url, model, api_key_env="OPENAI_API_KEY"), constitution)
    judge.prefer(prompt, a, b)    -> 0 (a is better) or 1 (b)
    judge(prompts, completions)   -> scores in [0, 1]  (the reward-function contract)

The judge model is any OpenAI-compatible chat-completions endpoint (a hosted API, vLLM,
llama.cpp's server, ...) or a local Hugging Face model (`LocalChatClient`). The HTTP client
retries server errors and timeouts with exponential backoff, keeps to a request rate, and
caches every verdict on disk keyed by (model, messages), so re-labelling a data set costs
nothing and a crashed labelling job resumes where it stopped. Only the standard library
talks HTTP.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from payoff.core.errors import ConfigError, DataError, PayoffError
from payoff.core.io import atomic_write_bytes


class JudgeError(PayoffError):
    """The judge endpoint failed after every retry, or answered something unusable."""


# ---- the constitution -------------------------------------------------------------------
def load_constitution(path: str | Path) -> list[str]:
    """Principles from a YAML file (`principles: [...]` or a list) or Markdown bullets (- / * / 1.)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"constitution file {str(path)!r} does not exist")
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text)
        principles = data.get("principles") if isinstance(data, dict) else data
        if not isinstance(principles, list) or not all(isinstance(p, str) for p in principles):
            raise DataError(f"{path}: expected 'principles: [text, ...]' or a list of strings")
    else:
        principles = [
            m.group(1).strip() for m in re.finditer(r"^\s*(?:[-*]|\d+\.)\s+(.+)$", text, re.M)
        ]
    if not principles:
        raise DataError(f"{path}: holds no principles")
    return principles


# ---- clients ------------------------------------------------------------------------------
class ChatClient(Protocol):
    model: str

    def complete(self, messages: list[dict[str, str]]) -> str: ...


class OpenAIChatClient:
    """POST {base_url}/chat/completions with retries, a timeout, a rate limit and a disk cache.

    base_url: e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1.
    api_key_env: name of the environment variable holding the key (never the key itself;
        empty = send no Authorization header, for local servers).
    retries: extra attempts after a 5xx, 429, connection error or timeout (not after 4xx:
        those are our mistake and repeat identically). Backoff doubles from `backoff` s.
    requests_per_second: at most this many requests start per second (0 = no limit).
    cache_dir: verdicts stored as JSON files named by a hash of (model, messages, options).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "",
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        requests_per_second: float = 0.0,
        cache_dir: str | Path | None = None,
        max_tokens: int = 16,
        temperature: float = 0.0,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"judge base_url must start with http:// or https://, got {base_url!r}"
            )
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = os.environ.get(api_key_env, "") if api_key_env else ""
        if api_key_env and not self.api_key:
            raise ConfigError(f"judge api key: environment variable {api_key_env!r} is not set")
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.interval = 1.0 / requests_per_second if requests_per_second > 0 else 0.0
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else None
        self.options = {"max_tokens": max_tokens, "temperature": temperature}
        self._lock = threading.Lock()
        self._next_start = 0.0
        self.calls = 0  # HTTP requests made (retries included)
        self.cache_hits = 0

    def _cache_path(self, messages: list[dict[str, str]]) -> Path | None:
        if self.cache_dir is None:
            return None
        key = json.dumps(
            {"model": self.model, "messages": messages, **self.options}, sort_keys=True
        )
        return self.cache_dir / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def _wait_for_rate_limit(self) -> None:
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_start)
            self._next_start = start + self.interval
        if start > now:
            time.sleep(start - now)

    def complete(self, messages: list[dict[str, str]]) -> str:
        """The assistant's reply text (from the cache when this exact request was answered before)."""
        cached = self._cache_path(messages)
        if cached is not None and cached.is_file():
            self.cache_hits += 1
            return json.loads(cached.read_text())["content"]
        body = json.dumps({"model": self.model, "messages": messages, **self.options}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last_error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            self._wait_for_rate_limit()
            self.calls += 1
            request = urllib.request.Request(self.url, body, headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    reply = json.loads(response.read())
                content = reply["choices"][0]["message"]["content"]
                break
            except urllib.error.HTTPError as err:
                last_error = f"HTTP {err.code} {err.reason}"
                if err.code < 500 and err.code != 429:
                    raise JudgeError(
                        f"judge endpoint {self.url} refused the request: {last_error}"
                    ) from None
            except TimeoutError as err:
                last_error = f"timed out after {self.timeout:g} s ({err})"
            except urllib.error.URLError as err:
                last_error = f"cannot connect ({err.reason})"
            except (KeyError, IndexError, json.JSONDecodeError) as err:
                raise JudgeError(
                    f"judge endpoint {self.url} answered without choices[0].message.content: {err}"
                ) from None
        else:
            raise JudgeError(
                f"judge endpoint {self.url} failed {self.retries + 1} times; last: {last_error}"
            )
        if cached is not None:
            atomic_write_bytes(
                cached, json.dumps({"messages": messages, "content": content}).encode()
            )
        return content


class LocalChatClient:
    """A local Hugging Face causal LM as the judge: chat messages -> plain prompt -> greedy reply."""

    def __init__(self, model: Any, tokenizer: Any, name: str = "local", max_new_tokens: int = 16):
        from payoff.rollout.generation import LocalSampler

        self.sampler = LocalSampler(model, tokenizer)
        self.model = name
        self.max_new_tokens = max_new_tokens

    def complete(self, messages: list[dict[str, str]]) -> str:
        from payoff.rollout.generation import SamplingConfig

        prompt = messages_to_prompt(messages)
        sampling = SamplingConfig(temperature=0.0, max_new_tokens=self.max_new_tokens)
        return self.sampler.generate([prompt], sampling).completions[0]


def messages_to_prompt(messages: Sequence[dict[str, str]]) -> str:
    """A plain-text rendering of chat messages for models without a chat template."""
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "


# ---- the judge ----------------------------------------------------------------------------
class Judge:
    """Asks a chat model which of two answers better follows the constitution, or to score one."""

    __name__ = "judge"

    def __init__(self, client: ChatClient, principles: Sequence[str]):
        if not principles:
            raise ConfigError("a judge needs at least one principle")
        self.client = client
        self.principles = list(principles)
        self.unparsed = 0  # replies that named no verdict (counted, scored as a tie)

    def _system(self) -> str:
        rules = "\n".join(f"{i}. {p}" for i, p in enumerate(self.principles, 1))
        return f"You judge answers by these principles:\n{rules}"

    def prefer(self, prompt: str, a: str, b: str) -> int | None:
        """0 if answer A follows the principles better, 1 if B; None when the reply names neither."""
        messages = [
            {"role": "system", "content": self._system()},
            {
                "role": "user",
                "content": f"Question: {prompt}\nAnswer A: {a}\nAnswer B: {b}\nWhich answer is better? Reply A or B.",
            },
        ]
        reply = self.client.complete(messages).strip().upper()
        match = re.search(r"\b([AB])\b", reply)
        if not match:
            self.unparsed += 1
            return None
        return 0 if match.group(1) == "A" else 1

    def label(self, prompt: str, a: str, b: str) -> dict[str, str] | None:
        """A preference row {prompt, chosen, rejected} from the judge's verdict (None if it had none)."""
        verdict = self.prefer(prompt, a, b)
        if verdict is None:
            return None
        chosen, rejected = (a, b) if verdict == 0 else (b, a)
        return {"prompt": prompt, "chosen": chosen, "rejected": rejected}

    def score(self, prompt: str, completion: str) -> float | None:
        """A 0..1 score from a 0-10 rating in the reply (None when it holds no number)."""
        messages = [
            {"role": "system", "content": self._system()},
            {
                "role": "user",
                "content": f"Question: {prompt}\nAnswer: {completion}\nRate the answer from 0 to 10. Reply with the number.",
            },
        ]
        match = re.search(r"\d+(?:\.\d+)?", self.client.complete(messages))
        if not match:
            self.unparsed += 1
            return None
        return min(float(match.group()), 10.0) / 10.0

    def __call__(
        self, prompts: Sequence[str], completions: Sequence[str], **columns: Any
    ) -> list[float | None]:
        """The reward-function contract: one judged score per completion."""
        return [self.score(p, c) for p, c in zip(prompts, completions, strict=True)]
