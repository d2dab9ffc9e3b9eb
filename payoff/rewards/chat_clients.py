"""Chat clients for AI judges: chat messages in, the reply text out.

    client = OpenAIChatClient(base_url, model, api_key_env="OPENAI_API_KEY", cache_dir=...)
    client.complete(messages)     -> the reply text
    ask(client, messages, ...)    -> the same, passing the refresh/deadline/cancel
                                     keywords the client declares

The judge model is any OpenAI-compatible chat-completions endpoint (a hosted API, vLLM,
llama.cpp's server, ...) or a local Hugging Face model (`LocalChatClient`). The HTTP client
retries server errors and timeouts with exponential backoff inside an overall deadline
(abandoned calls stop; no thread keeps retrying), keeps to a request rate, and caches every
reply on disk keyed by (endpoint, model, messages, sampling options), so re-labelling a data
set costs nothing and a crashed labelling job resumes where it stopped. Only the standard
library talks HTTP.

The judges (payoff.rewards.judge, payoff.rewards.relative_judge) build the messages and
read the verdict; a client only moves text, and raises the JudgeError family below.
"""

from __future__ import annotations

import hashlib
import http.client
import inspect
import json
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from payoff.core.errors import ConfigError, PayoffError
from payoff.core.imports import refuse_untrusted
from payoff.core.io import atomic_write_bytes
from payoff.envs.tasks.datasets import render_chat


class JudgeError(PayoffError):
    """The judge endpoint failed after every retry, or answered something unusable."""


class UnusableReply(JudgeError):
    """The endpoint answered, but not with text: content a number, null, a non-text list, too big."""


class JudgeAbandoned(JudgeError):
    """The call passed its deadline or was cancelled; no further request is made for it."""


class ChatClient(Protocol):
    """What a judge needs: `complete(messages)` -> the reply text.

    Clients may also accept the keywords `refresh` (bypass the cache), `deadline` (a
    time.monotonic() time after which no request starts and none is waited for) and
    `cancel` (a threading.Event that abandons the call); the judge passes those a client
    declares.
    """

    model: str

    def complete(self, messages: list[dict[str, str]]) -> str: ...


def reply_text(content: Any) -> str:
    """The text of a chat reply's message.content: a string, or a list of text parts.

    Anything else (a number, null, a list holding non-text parts) raises UnusableReply.
    """
    if isinstance(content, str):
        return content
    if (
        isinstance(content, list)
        and content
        and all(
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
            for part in content
        )
    ):
        return "".join(part["text"] for part in content)
    raise UnusableReply(f"the judge's message.content is {_describe(content)}, not text")


def _describe(value: Any) -> str:
    """A short description of a decoded JSON value that never recurses into it (a reply can
    nest lists deeper than repr() can print)."""
    if isinstance(value, list | dict):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"{type(value).__name__} ({str(value)[:80]!r})"


class OpenAIChatClient:
    """POST {base_url}/chat/completions with retries, a deadline, a rate limit and a disk cache.

    base_url: e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1.
    api_key_env: name of the environment variable holding the key (never the key itself;
        empty = send no Authorization header, for local servers).
    timeout: seconds one request may wait on the socket (connect, or one read).
    retries: extra attempts after a 5xx, 429, connection error or timeout (not after 4xx:
        those are our mistake and repeat identically). Backoff doubles from `backoff` s.
    deadline: seconds one `complete` call may take in all, retries and backoff included;
        past it the call raises JudgeAbandoned and makes no further request. Every socket
        wait is cut to the time left, so a call never outlives its deadline by more than
        the moment it takes to notice.
    requests_per_second: at most this many requests start per second (0 = no limit).
    cache_dir: replies stored as JSON files named by a hash of (endpoint, model, messages,
        options); a cached reply is checked against that key when it is read.
    max_tokens: the reply's token budget. The judge asks for a few sentences of reasons and
        a final verdict line; too small a budget cuts the line off (counted as unparsable).
    max_reply_bytes: a larger HTTP body is refused (UnusableReply) rather than buffered.
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
        max_tokens: int = 256,
        temperature: float = 0.0,
        deadline: float = 120.0,
        max_reply_bytes: int = 1 << 20,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"judge base_url must start with http:// or https://, got {base_url!r}"
            )
        # A loaded run's config must not pick where your prompts, and the key in any
        # environment variable it names, are sent (payoff.core.imports).
        refuse_untrusted("judge endpoint", f"{base_url} (key from ${api_key_env or '-'})")
        for name, value in (("timeout", timeout), ("deadline", deadline)):
            if not value > 0:
                raise ConfigError(f"judge client {name} must be > 0 seconds, got {value!r}")
        if retries < 0 or backoff < 0:
            raise ConfigError(
                f"judge client retries and backoff must be >= 0, got {retries!r}, {backoff!r}"
            )
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.api_key = os.environ.get(api_key_env, "") if api_key_env else ""
        if api_key_env and not self.api_key:
            raise ConfigError(f"judge api key: environment variable {api_key_env!r} is not set")
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.deadline = deadline
        self.max_reply_bytes = max_reply_bytes
        self.interval = 1.0 / requests_per_second if requests_per_second > 0 else 0.0
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else None
        self.options = {"max_tokens": max_tokens, "temperature": temperature}
        self._lock = threading.Lock()
        self._next_start = 0.0
        self.calls = 0  # HTTP requests made (retries included)
        self.cache_hits = 0

    # ---- cache ----------------------------------------------------------------------------
    def cache_key(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        """Everything that decides the reply: endpoint, model, the full prompt, sampling options."""
        return {
            "endpoint": self.base_url,
            "model": self.model,
            "messages": messages,
            "options": self.options,
        }

    def _cache_path(self, key: dict[str, Any]) -> Path | None:
        if self.cache_dir is None:
            return None
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        return self.cache_dir / f"{digest[:32]}.json"

    def _cached(self, path: Path, key: dict[str, Any]) -> str | None:
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            return None  # unreadable or corrupt: ask again (and overwrite)
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        content = entry.get("content")
        return content if isinstance(content, str) else None

    # ---- requests -------------------------------------------------------------------------
    def _wait_for_rate_limit(self, stop_at: float, cancel: threading.Event | None) -> None:
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_start)
            self._next_start = start + self.interval
        if start > now:
            _sleep(min(start, stop_at) - now, cancel)

    def _post(self, body: bytes, headers: dict[str, str], stop_at: float, cancel: Any) -> str:
        """One request, its body read in chunks so that the deadline and the size cap hold.

        The socket waits at most min(timeout, time left) per connect or read, so a call
        outlives its deadline by at most one such wait.
        """
        wait = max(0.001, min(self.timeout, stop_at - time.monotonic()))
        request = urllib.request.Request(self.url, body, headers, method="POST")
        chunks, size = [], 0
        with urllib.request.urlopen(request, timeout=wait) as response:
            while chunk := response.read1(65536):
                size += len(chunk)
                if size > self.max_reply_bytes:
                    raise UnusableReply(
                        f"judge endpoint {self.url} sent more than {self.max_reply_bytes} bytes"
                    )
                chunks.append(chunk)
                if time.monotonic() >= stop_at or (cancel is not None and cancel.is_set()):
                    raise JudgeAbandoned("the deadline passed while the reply was being read")
        try:
            reply = json.loads(b"".join(chunks))
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise UnusableReply(
                f"judge endpoint {self.url} answered without choices[0].message.content: {err!r}"
            ) from None
        except RecursionError:
            raise UnusableReply(
                f"judge endpoint {self.url} answered JSON nested deeper than Python can decode"
            ) from None
        return reply_text(content)

    def complete(
        self,
        messages: list[dict[str, str]],
        *,
        refresh: bool = False,
        deadline: float | None = None,
        cancel: threading.Event | None = None,
    ) -> str:
        """The assistant's reply text (from the cache when this exact request was answered before).

        refresh: skip the cache and ask again (the new reply replaces the cached one).
        deadline: a time.monotonic() time that bounds this call further than self.deadline.
        cancel: an Event; once set, the call stops before its next request or read.
        """
        key = self.cache_key(messages)
        cached = self._cache_path(key)
        if cached is not None and not refresh and cached.is_file():
            content = self._cached(cached, key)
            if content is not None:
                self.cache_hits += 1
                return content
        stop_at = time.monotonic() + self.deadline
        if deadline is not None:
            stop_at = min(stop_at, deadline)
        body = json.dumps({"model": self.model, "messages": messages, **self.options}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last_error = "none"
        for attempt in range(self.retries + 1):
            if attempt:
                _sleep(min(self.backoff * 2 ** (attempt - 1), stop_at - time.monotonic()), cancel)
            self._wait_for_rate_limit(stop_at, cancel)
            if (cancel is not None and cancel.is_set()) or time.monotonic() >= stop_at:
                why = (
                    "was cancelled"
                    if cancel is not None and cancel.is_set()
                    else "passed its deadline"
                )
                raise JudgeAbandoned(
                    f"judge call to {self.url} {why} after {attempt} attempts; last: {last_error}"
                )
            self.calls += 1
            try:
                content = self._post(body, headers, stop_at, cancel)
                break
            except urllib.error.HTTPError as err:
                last_error = f"HTTP {err.code} {err.reason}"
                if err.code < 500 and err.code != 429:
                    raise JudgeError(
                        f"judge endpoint {self.url} refused the request: {last_error}"
                    ) from None
            except JudgeAbandoned as err:
                raise JudgeAbandoned(
                    f"judge call to {self.url} abandoned on attempt {attempt + 1}: {err}"
                ) from None
            except TimeoutError as err:
                last_error = f"timed out ({err})"
            except urllib.error.URLError as err:
                last_error = f"cannot connect ({err.reason})"
            except (OSError, http.client.HTTPException) as err:
                last_error = f"connection failed ({type(err).__name__}: {err})"
        else:
            raise JudgeError(
                f"judge endpoint {self.url} failed {self.retries + 1} times; last: {last_error}"
            )
        if cached is not None:
            atomic_write_bytes(cached, json.dumps({"key": key, "content": content}).encode())
        return content


def _sleep(seconds: float, cancel: threading.Event | None) -> None:
    """Sleep, waking early when `cancel` is set."""
    if seconds <= 0:
        return
    if cancel is not None:
        cancel.wait(seconds)
    else:
        time.sleep(seconds)


class LocalChatClient:
    """A local Hugging Face causal LM as the judge: chat messages -> plain prompt -> greedy reply.

    max_new_tokens must leave room for the verdict line (`SCORE: 10` or `PREFERRED: B`)
    after any reasons the model writes first.
    """

    def __init__(self, model: Any, tokenizer: Any, name: str = "local", max_new_tokens: int = 64):
        from payoff.rollout.generation import LocalSampler

        self.sampler = LocalSampler(model, tokenizer)
        self.model = name
        self.max_new_tokens = max_new_tokens

    def complete(self, messages: list[dict[str, str]], *, refresh: bool = False) -> str:
        """Greedy reply; refresh changes nothing (there is no cache, and greedy repeats itself)."""
        from payoff.rollout.generation import SamplingConfig

        prompt = render_chat(messages)  # the plain format of task rows, for a template-less model
        sampling = SamplingConfig(temperature=0.0, max_new_tokens=self.max_new_tokens)
        return self.sampler.generate([prompt], sampling).completions[0]


def ask(
    client: ChatClient,
    messages: list[dict[str, str]],
    refresh: bool = False,
    deadline: float | None = None,
    cancel: threading.Event | None = None,
) -> str:
    """client.complete(messages) with the optional keywords this client declares."""
    try:
        parameters = inspect.signature(client.complete).parameters
    except (TypeError, ValueError):
        parameters = {}  # type: ignore[assignment]
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    options = {"refresh": refresh, "deadline": deadline, "cancel": cancel}
    kwargs = {k: v for k, v in options.items() if takes_all or k in parameters}
    if cancel is not None and cancel.is_set():
        raise JudgeAbandoned("judge call cancelled before it started")
    if deadline is not None and time.monotonic() >= deadline:
        raise JudgeAbandoned("judge call not started: its deadline has passed")
    return reply_text(client.complete(messages, **kwargs))
