"""Asynchronous LLM generation: sample the next batches while the learner updates.

`ProcessSampler` implements the `Sampler` protocol of `payoff.rollout.generation` and adds
`submit(prompts, sampling, generator=None, seed=None) -> Pending`, which returns at once: a
child process with its own copy of the policy samples the batch while the caller goes on
(an optimizer step, say), and `pending.result()` waits for the `Generation`. `RaySampler`
(`payoff.rollout.ray_generation`) has the same `submit`; `AsyncSampler` names the pair.

The child is one fresh interpreter (multiprocessing's 'spawn': never a fork of a process
whose torch has threads). It starts on the first `submit`, so a sampler that only evaluates
costs nothing, builds the model with `load_lm(model_config, seed=seed)` like a Ray
`GenerationWorker`, sets `torch.set_num_threads(threads)`, and runs payoff's own
`LocalSampler` on each request. As with every spawned worker, a script that trains from
Python must start under `if __name__ == "__main__":` (the child imports the script).

Weights and staleness. The sampler holds the learner's model. `weights_updated()` (GRPO
calls it after every optimizer step) marks its weights as changed, as does torch's
per-tensor write counter; the next `submit` then first sends the trainable parameters
(encoded there and then: a snapshot) as a new version, ahead of the request, down the one
FIFO pipe to the child. The weights themselves travel through shared memory and the pipe
carries where they are: 4 MB pushed through a 64 KB pipe
needed ~60 wake-ups of the child's reading thread, each waiting for the interpreter lock
that the busy sampling thread holds, a large share of the learner's step. Weights of one
dtype are one flat buffer of raw values in a slot of a ring of a few reusable slots in one
mapped file (`WeightRing`, in payoff.rollout.async_transport), their names and shapes in
the message; the child checks the size against the shapes, copies the slot into its model and marks it read. The learner's
push is one copy into the slot (neither an encoded checkpoint tree nor a file per version). Mixed dtypes (rare) go as a
checkpoint tree in the message itself. The shared memory has no name anyone must remove:
on Linux it is a memfd (anonymous shared memory) that the child opens through the learner's
/proc/<pid>/fd, so the kernel frees it when the last of the two processes holding it ends,
SIGKILL included (nothing is left in /dev/shm); elsewhere it is a file in a private
temporary folder, removed by `close()` and at exit. The child handles messages in order, so a batch sampled with
`version` v is sampled with the weights as they were when it was submitted: a request
submitted before an update uses the old weights even when the child reaches it after the
update, one submitted after it uses the new ones. The staleness of a batch is therefore
(learner's version when its loss is computed) - `pending.version`, and the caller controls
it by how far ahead it submits. Frozen weights (a LoRA base) are never sent: the child
loaded the same ones. Neither side waits on the other: a thread in the child moves requests
off the pipe as they come, a thread here collects the replies.

Randomness, as on Ray. With `generator` its state travels with the request, the child
samples with it, and `result()` moves the caller's generator to where sampling ended, so
`submit(p, s, generator=g).result()` equals `LocalSampler.generate(p, s, g)` bit for bit
(same weights, `threads` equal to the learner's: float sums depend on the thread count);
without either, torch's global stream is used the same way. A generator can have one batch
in flight at a time (a second would start from the same state); batches in flight together
pass `seed=` instead and are sampled from `Generator().manual_seed(seed)`.

Faults. An exception inside the child comes back and is raised by `result()` (payoff errors
as themselves, others as a RunError naming them, the child's traceback as the cause); the
child goes on with the next request. A child that dies (killed, out of memory) makes
`result()` raise a RunError with its exit code instead of hanging; it is not restarted
(`close()` and a later `submit` start a fresh one). `close()` stops the child; it also runs
when a forgotten sampler is collected or the interpreter exits, and a child whose parent is
gone exits by itself.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Protocol

import torch

from payoff.core.errors import ConfigError, RunError
from payoff.models.lm import ModelConfig
from payoff.rollout.async_transport import (
    FLAT_DTYPES,
    ErrorReport,
    WeightRing,
    error_report,
    layout_dtype,
    map_shared,
    raise_report,
    receive_message,
    ring_slot,
    send_message,
    split_flat,
    unflatten,
)
from payoff.rollout.generation import (
    Generation,
    LocalSampler,
    Sampler,
    SamplingConfig,
    WeightVersions,
    continue_stream,
    load_weights,
    sampling_stream,
)
from payoff.track.checkpoint import dumps_state
from payoff.track.interrupt import ignore_ctrl_c_in_worker


class Pending:
    """A batch being sampled: `version` is the weights version it samples with (the
    sampler's `version` when it was submitted); `result()` waits for its `Generation`."""

    def __init__(self, version: int, wait: Callable[[], Generation]):
        self.version = version
        self._wait: Callable[[], Generation] | None = wait

    def result(self) -> Generation:
        """The generation (blocks until it is there); raises what went wrong in the sampler.
        Call it once: it also moves the generator it was submitted with."""
        if self._wait is None:
            raise RunError(
                "this batch's result() was already called; it hands its Generation over once"
            )
        wait, self._wait = self._wait, None
        return wait()


class AsyncSampler(Sampler, Protocol):
    """A `Sampler` that can also sample in the background: `ProcessSampler`, `RaySampler`."""

    @property
    def version(self) -> int:
        """How many weight versions were sent so far (a new batch samples with this one)."""
        ...

    def submit(
        self,
        prompts: list[str],
        sampling: SamplingConfig,
        generator: torch.Generator | None = None,
        seed: int | None = None,
    ) -> Pending: ...


class ProcessSampler:
    """A `Sampler` whose generation runs in one child process with its own model copy.

    model_config: how the child builds the model (`load_lm(model_config, seed=seed)`); the
        learner's current trainable weights are sent on top of it before its first batch.
    model: the learner's model; its trainable weights are sent when they change.
    pad_token_id: the tokenizer's padding id (kept for parity with RaySampler: one process
        samples whole batches, so nothing is joined here).
    seed: model seed for load_lm (only matters for a fresh tiny model without a path).
    threads: torch threads of the child. Equal to the learner's, sampling matches
        `LocalSampler` bit for bit; on a small machine give each side its share of the cores.
    batch_size: rows per forward inside the child (LocalSampler's batch_size).
    """

    def __init__(
        self,
        model_config: ModelConfig,
        model: torch.nn.Module,
        pad_token_id: int,
        seed: int = 0,
        threads: int = 1,
        batch_size: int = 256,
    ):
        if threads <= 0:
            raise ConfigError(f"threads must be > 0, got {threads}")
        if batch_size <= 0:
            raise ConfigError(f"batch_size must be > 0, got {batch_size}")
        self.model_config, self.model = model_config, model
        self.pad_token_id, self.seed = pad_token_id, seed
        self.threads, self.batch_size = threads, batch_size
        self._child: _Child | None = None  # started on the first submit
        self._closer: weakref.finalize | None = None
        self.weights = WeightVersions(model)
        self._requests = 0
        self._streams: set[int] = set()  # generators with a batch in flight (0: torch's own)
        self.counters = {"weight_pushes": 0}
        self.push_seconds = 0.0  # time spent sending weights, all pushes

    @property
    def version(self) -> int:
        """How many weight versions were sent so far (a new batch samples with this one)."""
        return self.weights.version

    @property
    def pid(self) -> int | None:
        """The child's process id (None before the first submit and after close)."""
        return None if self._child is None else self._child.process.pid

    @property
    def startup_seconds(self) -> float:
        """From starting the child to its model being ready (0 until it is)."""
        return 0.0 if self._child is None else self._child.startup_seconds

    def start(self, wait: bool = False) -> _Child:
        """Start the child (once; later calls return the running one). wait: return only
        when its model is ready (a trainer starts it in setup, so that the seconds of
        spawning and importing are not a training step's)."""
        if self._child is None:
            self._child = _Child(self.model_config, self.seed, self.threads, self.batch_size)
            self._closer = weakref.finalize(self, self._child.close)  # also runs at exit
            self.weights.forget()  # a new child gets the current weights first
        if wait:
            self._child.wait_ready()
        return self._child

    def close(self) -> None:
        """Stop the child (a later submit starts a new one); batches in flight are lost."""
        if self._closer is not None:
            self._closer()  # calls child.close once, however often close() is called
        self._child, self._closer = None, None
        self._streams.clear()

    # ---- weights --------------------------------------------------------------------------
    def weights_updated(self) -> None:
        """The learner stepped its optimizer: send the new weights before the next submit."""
        self.weights.updated()

    def _push_weights(self, child: _Child) -> None:
        """Send the trainable weights as a new version if they changed since the last one."""
        started = time.perf_counter()
        weights = self.weights.due()
        if weights is None:
            return
        child.send_weights(self.weights.version, {n: p.cpu() for n, p in weights.items()})
        self.counters["weight_pushes"] += 1
        self.push_seconds += time.perf_counter() - started

    # ---- sampling -------------------------------------------------------------------------
    def submit(
        self,
        prompts: list[str],
        sampling: SamplingConfig,
        generator: torch.Generator | None = None,
        seed: int | None = None,
    ) -> Pending:
        """Send a batch to the child and return at once; its `result()` waits for it.

        generator: sample from this stream (its state travels with the request; result()
            moves it on); None with no seed: torch's global stream, the same way.
        seed: sample from `Generator().manual_seed(seed)` instead, for batches in flight
            together (a generator's stream allows one at a time).
        """
        if generator is not None and seed is not None:
            raise ConfigError("submit takes a generator or a seed, not both")
        stream = None if seed is not None else 0 if generator is None else id(generator)
        if stream is not None and stream in self._streams:
            raise RunError(
                "this generator already has a batch in flight: call its result() first, or "
                "pass seed= to sample batches in flight together from streams of their own"
            )
        child = self.start()
        self._push_weights(child)
        rng_state = None
        if stream is not None:
            rng_state = generator.get_state() if generator is not None else torch.get_rng_state()
        request = self._requests
        self._requests += 1
        child.send(("generate", request, prompts, dict(vars(sampling)), rng_state, seed))
        if stream is not None:
            self._streams.add(stream)

        def wait() -> Generation:
            try:
                fields, end_state = child.wait(request)
                generation = Generation(**fields)
            finally:
                if stream is not None:
                    self._streams.discard(stream)
            if end_state is not None:  # the caller's stream continues where the child left it
                continue_stream(generator, end_state)
            return generation

        return Pending(self.weights.version, wait)

    def generate(
        self, prompts: list[str], sampling: SamplingConfig, generator: torch.Generator | None = None
    ) -> Generation:
        """Completions of `prompts`, sampled in the child with the current weights."""
        return self.submit(prompts, sampling, generator=generator).result()

    def metrics(self) -> dict[str, float]:
        """async/... metrics logged with every step: weight pushes and the seconds they took
        (cumulative; the first push waits for the child to start reading), MB per push."""
        return {
            "async/weight_pushes": float(self.counters["weight_pushes"]),
            "async/weight_mb": self.weights.bytes / 2**20,
            "async/push_seconds": self.push_seconds,
        }


def _unguarded_script() -> str | None:
    """The main script's path when the program runs one (not `python -c`, `-m` or a REPL),
    which spawned processes import again."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    spec = getattr(main, "__spec__", None)
    return path if isinstance(path, str) and spec is None else None


# ---- the child process and the pipes to it --------------------------------------------------
_STARTUP = -1  # reply id of the child's "model loaded" (or "could not load") message
# The ring's pieces under the names they had here before they moved to async_transport
_WeightRing, _slot, _unflatten = WeightRing, ring_slot, unflatten


class _Child:
    """The sampling process, its two pipes, and the thread here that collects its replies.

    It holds no reference to the ProcessSampler, so a forgotten sampler can be collected
    (and its finalizer stop the child).
    """

    def __init__(self, model_config: ModelConfig, seed: int, threads: int, batch_size: int):
        context = multiprocessing.get_context("spawn")
        requests_in, self.requests = context.Pipe(duplex=False)
        self.replies, replies_out = context.Pipe(duplex=False)
        self.process = context.Process(
            target=_serve,
            args=(model_config, seed, threads, batch_size, requests_in, replies_out, os.getpid()),
            name="payoff-sampler",
            daemon=True,
        )
        self.started = time.perf_counter()
        self.process.start()
        # The child holds the other ends: its death closes the reply pipe (EOF here).
        requests_in.close()
        replies_out.close()
        self.startup_seconds = 0.0
        self.arrived: dict[int, tuple[bool, Any]] = {}  # request id -> (ok, payload)
        self.changed = threading.Condition()
        self.lost = False  # the reply pipe hit EOF: the child is gone
        self.failed: ErrorReport | None = None  # the model could not be built
        self.send_lock = threading.Lock()
        self.ring: WeightRing | None = None  # made by the first flat weights version
        # Every ring made stays open until close(): a message naming an older one may still
        # be on its way to the child.
        self.rings: list[WeightRing] = []
        self.sent: tuple[str, Any] | None = None  # (ring path, layout) of the last version sent
        threading.Thread(target=self._collect, name="payoff-sampler-replies", daemon=True).start()

    def _collect(self) -> None:
        while True:
            try:
                request, ok, payload = receive_message(self.replies)
            except (EOFError, OSError):
                break
            except Exception as error:  # an unreadable reply: fail every wait, do not hang
                self.failed = error_report(error)
                break
            with self.changed:
                if request == _STARTUP:
                    self.startup_seconds = time.perf_counter() - self.started
                    self.failed = None if ok else payload
                else:
                    self.arrived[request] = (ok, payload)
                self.changed.notify_all()
        self.replies.close()
        with self.changed:
            self.lost = True
            self.changed.notify_all()

    def wait_ready(self) -> None:
        """Block until the child's model is built; raises when it could not be."""
        with self.changed:
            while not self.startup_seconds and self.failed is None and not self.lost:
                self.changed.wait(timeout=0.5)
                if not self.process.is_alive() and not self.startup_seconds:
                    break
        if self.failed is not None or not self.startup_seconds:
            self.raise_gone("while starting")

    def send(self, message: tuple[Any, ...]) -> None:
        """Encode `message` now (a snapshot of its tensors) and queue it for the child."""
        data = dumps_state(message)
        with self.send_lock:
            if self.lost or self.requests.closed:
                self.raise_gone("before it received a batch")
            try:
                self.requests.send_bytes(data)
            except OSError:  # broken pipe: it died
                self.raise_gone("before it received a batch")

    def send_weights(self, version: int, weights: dict[str, torch.Tensor]) -> None:
        """Write a weights version to shared memory (a snapshot) and queue where it is for
        the child, which loads it when it reaches the message.

        Weights of one dtype go as one flat buffer of raw values, their names and shapes in
        the message, into a slot of the weight ring (`WeightRing`): one copy into memory
        the child maps too. Mixed dtypes go as a checkpoint tree in the message itself."""
        dtypes = {str(t.dtype) for t in weights.values()}
        dtype = dtypes.pop() if len(dtypes) == 1 else None
        if dtype in FLAT_DTYPES:
            layout = [[name, list(t.shape)] for name, t in weights.items()]
            nbytes = sum(t.numel() * t.element_size() for t in weights.values())
            if self.ring is None or self.ring.nbytes != nbytes:
                self.ring = WeightRing(nbytes, version)
                self.rings.append(self.ring)
            slot = self.ring.write(version, weights.values(), self.check_alive)
            # The layout goes with a ring's first version and whenever it changes; the
            # child keeps the last one per ring (None: the same as before).
            sent = (self.ring.path, layout)
            self.send(
                ("weights", version, self.ring.path, None if sent == self.sent else layout)
                + (dtype, slot)
            )
            self.sent = sent
            return
        self.send(("weights-tree", version, weights))

    def wait(self, request: int) -> Any:
        """The payload of reply `request`, once it arrives; raises the child's error."""
        dead_since: float | None = None
        with self.changed:
            while request not in self.arrived:
                if self.lost:
                    self.raise_gone(f"before it returned batch {request}")
                self.changed.wait(timeout=0.5)
                # EOF normally says the child is gone; is_alive() covers a pipe end that
                # some other process still holds.
                if self.process.is_alive():
                    dead_since = None
                elif dead_since is None:
                    dead_since = time.perf_counter()
                elif time.perf_counter() - dead_since > 2.0 and request not in self.arrived:
                    self.raise_gone(f"before it returned batch {request}")
            ok, payload = self.arrived.pop(request)
        if not ok:
            raise_report(payload)
        return payload

    def check_alive(self) -> None:
        """Raise (as `wait` would) when the child is gone."""
        if self.lost or not self.process.is_alive():
            self.raise_gone("while the learner waited for it to read a weights version")

    def raise_gone(self, when: str) -> None:
        if self.failed is not None:  # it exited because the model could not be built
            raise_report(self.failed)
        self.process.join(timeout=1.0)
        code = self.process.exitcode
        if code is not None and code < 0:
            reason = f"was killed by {signal.Signals(-code).name}"
        elif code is not None:
            reason = f"exited with code {code}"
        else:
            reason = "stopped answering"
        cause = "out of memory? killed? closed?"
        script = _unguarded_script()
        if code == 1 and when == "while starting" and script is not None:
            # spawn runs the main script again in the child: code that starts training at
            # import time starts it there too, and multiprocessing stops the child
            cause = (
                f"if {script} starts training when it is imported, put that "
                f'under `if __name__ == "__main__":`, since the sampling process imports '
                f"the main script; its error is printed above"
            )
        raise RunError(
            f"the sampling process (pid {self.process.pid}) {reason} {when} ({cause}); it is "
            f"not restarted: close() the sampler and submit again to start a new one"
        )

    def close(self) -> None:
        """Stop the child: the closed pipe makes it exit; kill it if it does not."""
        with self.send_lock:
            self.requests.close()
        self.process.join(timeout=5.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        for ring in self.rings:
            ring.close()
        self.rings.clear()


def _serve(
    model_config: ModelConfig,
    seed: int,
    threads: int,
    batch_size: int,
    requests: Connection,
    replies: Connection,
    parent_pid: int,
) -> None:
    """The child's main loop: build the model, then load weights and sample, in order."""
    ignore_ctrl_c_in_worker()  # the parent stops it (Ctrl-C reaches the process group)
    inbox: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
    threading.Thread(target=_read_requests, args=(requests, inbox, parent_pid), daemon=True).start()

    def reply(request: int, ok: bool, payload: Any) -> None:
        send_message(replies, (request, ok, payload))

    from payoff.models.lm import load_lm

    torch.set_num_threads(threads)
    try:
        model, tokenizer = load_lm(model_config, seed=seed)
    except Exception as error:
        reply(_STARTUP, False, error_report(error))
        return
    # The parameters keep requires_grad as in the learner (sampling runs under no_grad
    # anyway): torch's CPU linear takes another path for a weight that does not require
    # grad (the LM head on the prompt's last position), and the logprobs would differ from
    # the learner's own sampling in the last bit.
    sampler = LocalSampler(model, tokenizer, batch_size)
    reply(_STARTUP, True, None)
    bad_weights: ErrorReport | None = None  # reported to every batch until good ones come
    rings: dict[str, torch.Tensor] = {}  # the learner's weight rings, mapped here
    layouts: dict[str, Any] = {}  # the last layout each ring's versions came in

    def whose(version: int) -> str:
        return f"the sampling process's model (version {version})"

    while True:
        message = inbox.get()
        if message[0] == "weights-tree":  # mixed dtypes: the tensors came in the message
            _, version, tree = message
            try:
                load_weights(model, tree, whose(version))
                bad_weights = None
            except Exception as error:
                bad_weights = error_report(error)
            continue
        if message[0] == "weights":
            _, version, path, layout, dtype, slot = message
            what = f"weights version {version} in {path}"
            try:  # a slot of the weight ring: copied into the model
                if path not in rings:
                    rings[path] = map_shared(path)
                memory = rings[path]
                layout = layouts[path] = layouts.get(path) if layout is None else layout
                flat_dtype = layout_dtype(layout, dtype, what)
                size = sum(int(torch.Size(shape).numel()) for _, shape in layout)
                flat = ring_slot(memory, slot, size * flat_dtype.itemsize, flat_dtype)
                try:
                    load_weights(model, split_flat(flat, layout, what), whose(version))
                finally:  # the learner may reuse the slot
                    memory[: WeightRing.HEADER].view(torch.int64)[slot] = version
                bad_weights = None
            except Exception as error:
                bad_weights = error_report(error)
            continue
        _, request, prompts, sampling_fields, rng_state, sample_seed = message
        sampling = SamplingConfig(**sampling_fields)
        if bad_weights is not None:
            reply(request, False, bad_weights)
            continue
        generator = sampling_stream(rng_state, sample_seed)
        try:
            generation = sampler.generate(prompts, sampling, generator)
        except Exception as error:
            reply(request, False, error_report(error))
            continue
        end_state = generator.get_state() if rng_state is not None else None
        reply(request, True, (dict(vars(generation)), end_state))


def _read_requests(
    requests: Connection, inbox: queue.SimpleQueue[tuple[Any, ...]], parent_pid: int
) -> None:
    """Child side: move requests into `inbox` as they come, so that the parent never waits
    on a busy child; end the process when the parent closes the pipe or is gone."""
    while os.getppid() == parent_pid:
        try:
            if requests.poll(1.0):
                inbox.put(receive_message(requests))
        except (EOFError, OSError):
            break
    os._exit(0)
