"""Trajectory-level GRPO for tool-using agents: G whole episodes per task, one reward each.

One step, readable top to bottom in `iterate`:

    1. rollout    draw `tasks_per_step` tasks, run `group_size` episodes of each (batched,
                  multi-turn: the model calls tools, reads results, answers)
    2. reward     r = task reward (verifier) - tool_cost * calls - turn_cost * (turns - 1)
                      - token_cost * model tokens - malformed_cost * calls the env
                      answered with an error  [+ judge_weight * relative-judge score]
    3. advantage  trajectory credit: A = (r - mean(group)) / std(group), shared by every
                  model token of the episode; turn credit: the return-to-go of each turn
                  (discounted by gamma) against the group's mean episode return
    4. update     grpo_loss (payoff.algos.grpo) over the model's own tokens only: the mask
                  excludes the prompt, tool results and template text

With model.path empty the tiny model is first taught the tool-call format by SFT on
scripted demonstrations (`sft`: payoff.algos.sft.train_on_episodes), cached on disk like
GRPO's base model.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from payoff.algos.base import NO_FINAL_EVALUATION, Algorithm, RunKeys
from payoff.algos.sft import train_on_episodes
from payoff.algos.shared.group import Aggregation, flat_groups, group_advantages, grpo_loss
from payoff.algos.shared.lm_step import accumulated_step
from payoff.core.cache import build_lock, cache_folder
from payoff.core.config import (
    MAX_BATCH,
    MAX_GROUP,
    MAX_PROMPTS,
    MAX_SEED,
    MAX_TOKENS,
    in_range,
    to_dict,
)
from payoff.core.device import check_device_name, resolve_device
from payoff.core.errors import ConfigError
from payoff.envs.tasks.base import contradict_row
from payoff.envs.text.formats import ChatTemplateFormat, Format, PlainFormat
from payoff.envs.text.tasks import AgentTaskConfig, make_agent_task, task_code
from payoff.models.base_model import save_cached_model, start_lm
from payoff.models.chat import has_chat_template, uses_chat_template
from payoff.models.lm import ModelConfig, load_lm, save_lm
from payoff.models.lm_optim import adamw, warmup_scheduler
from payoff.models.logprobs import sequence_logprobs
from payoff.models.tiny_lm import TinyLMConfig
from payoff.monitor.detectors import Monitor
from payoff.monitor.integrity import (
    Canaries,
    CanaryConfig,
    MonitorKeys,
    Planted,
    lm_monitors,
)
from payoff.monitor.judge_addressing import JudgeAddressing
from payoff.rewards.relative_judge import RelativeJudge, answer_judge
from payoff.rollout.episodes import (
    Episode,
    episode_metrics,
    pack_episodes,
    render_markdown,
    replay_episode,
    rollout_episodes,
)
from payoff.rollout.generation import LocalSampler, SamplingConfig, stop_token_ids

STOP = ["</tool>", "</answer>"]


@dataclass
class DemoSFTConfig:
    """SFT on scripted demonstration episodes, before RL: of the fresh tiny Llama when
    model.path is empty, and of the model you give with `given_model: true`.

    demonstrations: how many scripted episodes (the task's `demonstration`; tool results real).
    steps / batch_size / learning_rate: the SFT run. The loss covers the model's turns only.
    seed / tiny: initialisation and shape of the fresh tiny Llama.
    given_model: also teach the model.path model the call format first (a pretrained model
        whose chat template lists no tools, as SmolLM2's, has never seen payoff's
        `<tool>{...}</tool>` calls): the demonstrations are rendered as its episodes are
        (its chat template), and the tuned model is cached like the tiny one, keyed by
        model.path and these settings. false: model.path is the policy as it is.
    """

    demonstrations: int = 512
    steps: int = field(default=400, metadata=in_range(0, low_open=True))
    batch_size: int = field(default=32, metadata=in_range(0, low_open=True, most=MAX_BATCH))
    learning_rate: float = field(default=2e-3, metadata=in_range(0, low_open=True))
    seed: int = field(default=0, metadata=in_range(0, MAX_SEED))
    tiny: TinyLMConfig = field(default_factory=TinyLMConfig)
    given_model: bool = False

    def validate(self) -> None:
        for key in ("demonstrations", "steps", "batch_size"):  # SFT sampled from no episodes
            if getattr(self, key) < 1:
                raise ConfigError(
                    f"config key 'sft.{key}' must be >= 1, got {getattr(self, key)} (the tiny "
                    f"model learns the tool-call format from them; to skip it, give model.path)"
                )


@dataclass
class AgentGRPOConfig(RunKeys, MonitorKeys):
    """GRPO over whole multi-turn, tool-using episodes. Shared keys (seed, threads,
    log/eval/checkpoint intervals in rollout batches): payoff.algos.base.RunKeys.

    model: the policy (model.path = a local Hugging Face folder; empty = tiny Llama after `sft`).
    sft: demonstration SFT that teaches the tiny model the tool-call format first.
    task: the agent task (problems, tools, turn and token limits).
    steps / tasks_per_step / group_size: rollout batches, tasks per batch, episodes per task.
    credit: 'trajectory' = one advantage per episode (from its final reward); 'turn' = each
        turn's discounted return-to-go (gamma) against the group baseline, so a costly tool
        call is blamed on the turn that made it.
    tool_cost / turn_cost / token_cost: the efficiency term subtracted from the reward. A tool
        cost is what makes the agent learn *when* a call is worth it; too high and it stops
        calling even when it needs to.
    malformed_cost: subtracted for each tool call the env answered with an error (bad JSON,
        unknown tool or document, bad arguments). Without it a failed episode with broken
        calls scores the same as a clean failure, and pushing failures down can drift the
        tiny model toward broken calls.
    negative_weight: multiplies negative advantages (below-average episodes pushed down);
        1 = plain GRPO, 0 = learn only from better-than-average episodes (close to
        rejection-sampling fine-tuning). With the tiny model, pushing failures down can
        dominate the update and break well-formed text without making the successes likelier.
    judge_weight / judge_normalization: add a relative judge's within-group score (the local
        `answer_judge`) times this weight; 0 = verifier only.
    learning_rate / max_grad_norm / warmup_steps / clip_eps / scale_rewards /
        loss_aggregation / updates_per_batch / skip_zero_advantage: as in grpo ('token'
        aggregation = every model token of the batch counts the same, whatever the episode's
        length; there is no KL term here, so rows with advantage 0, e.g. every episode of a
        group that all succeeded, are always skippable).
    temperature / max_new_tokens: sampling per model turn (max_new_tokens caps one turn).
    eval_every / log_every / checkpoint_every: in steps; eval is greedy on task.eval_size
        held-out tasks (eval_every 0: only before the first step and at the end, with
        final_eval).
    final_eval: evaluate at the end (summary.json's final_eval). eval_every and final_eval
        are off for a trainer made in Python (learn(n) only trains); `payoff train` runs
        default to eval_every 10 and final_eval true (run_defaults).
    chat_template: render episodes with the tokenizer's chat template (Hugging Face models,
        tools listed in it) instead of the tiny model's plain format. null (default) follows
        model.chat_template (auto: the template when the tokenizer has one; the tiny model
        has none, so it keeps the plain format); true insists on the template (an error when
        the tokenizer has none); false is the plain format.
    device: auto | cpu | cuda | cuda:N | mps (payoff.core.device); auto = a GPU when torch
        sees one. The model trains there; the text envs run on the CPU.
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    sft: DemoSFTConfig = field(default_factory=DemoSFTConfig)
    task: AgentTaskConfig = field(default_factory=AgentTaskConfig)
    canaries: CanaryConfig = field(default_factory=CanaryConfig)
    steps: int = field(default=40, metadata=in_range(0, low_open=True))
    tasks_per_step: int = field(
        default=16,
        metadata=in_range(
            0,
            low_open=True,
            most=MAX_PROMPTS,
            product=("group_size", 65_536, "episodes in one rollout batch"),
        ),
    )
    group_size: int = field(default=4, metadata=in_range(2, most=MAX_GROUP))
    credit: Literal["trajectory", "turn"] = "trajectory"
    gamma: float = field(default=1.0, metadata=in_range(0, 1))
    tool_cost: float = 0.1
    turn_cost: float = 0.0
    token_cost: float = 0.0
    malformed_cost: float = 0.0
    negative_weight: float = field(default=1.0, metadata=in_range(0, 1))
    judge_weight: float = 0.0
    judge_normalization: str = "zscore"
    learning_rate: float = field(default=3e-4, metadata=in_range(0, low_open=True))
    warmup_steps: int = field(default=5, metadata=in_range(0))
    max_grad_norm: float = field(default=1.0, metadata=in_range(0))
    clip_eps: float = field(default=0.2, metadata=in_range(0, low_open=True))
    scale_rewards: bool = True
    loss_aggregation: Aggregation = "token"
    updates_per_batch: int = field(default=1, metadata=in_range(0, low_open=True))
    skip_zero_advantage: bool = True
    temperature: float = field(default=1.0, metadata=in_range(0, low_open=True))
    max_new_tokens: int = field(default=72, metadata=in_range(0, low_open=True, most=MAX_TOKENS))
    log_every: int = field(default=1, metadata=in_range(0, low_open=True))
    eval_every: int = field(default=0, metadata=in_range(0))
    checkpoint_every: int = field(default=20, metadata=in_range(0, low_open=True))
    chat_template: bool | None = None
    device: str = field(default="auto", metadata={"check": check_device_name})
    final_eval: bool = False

    run_defaults: ClassVar[dict[str, Any]] = {"eval_every": 10, "final_eval": True}

    def validate(self) -> None:
        self.task.validate()
        if self.group_size < 2:
            raise ConfigError(f"config key 'group_size' must be >= 2, got {self.group_size}")
        for name in ("steps", "tasks_per_step", "updates_per_batch", "log_every"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"config key {name!r} must be > 0, got {getattr(self, name)}")
        if self.eval_every < 0:
            raise ConfigError(
                f"config key 'eval_every' must be >= 0 (0: none during training), "
                f"got {self.eval_every}"
            )
        if self.credit not in ("trajectory", "turn"):
            raise ConfigError(
                f"config key 'credit' must be 'trajectory' or 'turn', got {self.credit!r}"
            )
        if not 0.0 < self.gamma <= 1.0:
            raise ConfigError(f"config key 'gamma' must be in (0, 1], got {self.gamma}")
        if not 0.0 <= self.negative_weight <= 1.0:
            raise ConfigError(
                f"config key 'negative_weight' must be in [0, 1], got {self.negative_weight}"
            )


def turn_advantages(
    turn_rewards: list[list[float]],
    group_size: int,
    gamma: float = 1.0,
    scale: bool = True,
    eps: float = 1e-4,
) -> list[list[float]]:
    """Per-turn credit: A_{e,k} = (G_{e,k} - mean_g G_{g,0}) / (std_g G_{g,0} + eps).

    G_{e,k} = sum_{j >= k} gamma^(j-k) r_{e,j} is episode e's return from turn k on; the
    baseline is the group's episode returns (G_0), as in trajectory GRPO. With gamma = 1 and
    only a final reward every turn gets the trajectory advantage.
    """
    returns = []
    for rewards in turn_rewards:
        g, out = 0.0, []
        for r in reversed(rewards):
            g = r + gamma * g
            out.append(g)
        returns.append(out[::-1])
    result = []
    for start in range(0, len(returns), group_size):
        group = returns[start : start + group_size]
        totals = torch.tensor([r[0] if r else 0.0 for r in group])
        mean, std = totals.mean(), totals.std()
        for r in group:
            values = torch.tensor(r) - mean
            if scale:
                values = values / (std + eps)
            result.append(values.tolist())
    return result


def build_agent_base(config: AgentGRPOConfig) -> Path:
    """The model after SFT on demonstrations (cached under $PAYOFF_CACHE/agent-models/): the
    tiny Llama, or with sft.given_model the model.path model, its episodes rendered as
    training renders them (its chat template when it has one)."""
    given = config.sft.given_model and bool(config.model.path)
    sft_key = to_dict(config.sft)
    if given:
        sft_key.pop("tiny")  # (the given model's shape is its own)
    key: dict[str, Any] = {"sft": sft_key, "task": to_dict(config.task)}
    if given:
        key["model"] = {"path": config.model.path, "dtype": config.model.dtype}
        key["chat_template"] = config.chat_template
    if ":" in config.task.name:  # its code, so a changed task builds a new base
        key["task_code"] = task_code(config.task.name)
    path = cache_folder("agent-models", config.task.name.replace(":", "-"), key)
    if (path / "config.json").is_file():
        return path
    with build_lock(path):  # another process building the same model: wait, then reuse it
        if (path / "config.json").is_file():
            return path
        sft = config.sft
        print(
            f"agent base model: SFT of {config.model.path if given else 'the tiny model'} on "
            f"{sft.demonstrations} demonstrations into {path}",
            file=sys.stderr,
        )
        model_config = (
            ModelConfig(
                path=config.model.path,
                dtype=config.model.dtype,
                chat_template=config.model.chat_template,
            )
            if given
            else ModelConfig(tiny=sft.tiny)
        )
        model, tokenizer = load_lm(
            model_config, seed=sft.seed, device=resolve_device(config.device)
        )
        task = make_agent_task(config.task)  # (setup made it first: the trust rule has run)
        rng = np.random.default_rng(sft.seed)
        episode_format = episode_format_for(config, task, tokenizer)
        demos = [
            replay_episode(
                task.make_env(), t, task.demonstration(t, rng), episode_format, tokenizer
            )
            for t in task.sample(rng, sft.demonstrations)
        ]
        warn_about_demonstrations(demos, config.max_new_tokens, config.task.name)
        train_on_episodes(
            model, tokenizer, demos, sft.steps, sft.batch_size, sft.learning_rate, rng
        )
        return save_cached_model(model, tokenizer, path)


def episode_format_for(config: AgentGRPOConfig, task: Any, tokenizer: Any) -> Format:
    """How episodes become model text: the tokenizer's chat template, tools listed in it
    (config.chat_template, or model.chat_template's choice for this tokenizer), else the
    tiny model's plain format."""
    wanted = config.chat_template
    if wanted is None:
        wanted = uses_chat_template(tokenizer, config.model.chat_template)
    elif wanted and not has_chat_template(tokenizer):
        raise ConfigError(
            "config key 'chat_template' is true but the model's tokenizer has no chat "
            f"template (model.path={config.model.path!r}); set chat_template: false "
            "for the plain format, or leave it null to use a template only when there is one"
        )
    if not wanted:
        return PlainFormat()
    return ChatTemplateFormat(tokenizer, [t.spec() for t in task.make_env().tools.values()])


def warn_about_demonstrations(demos: list[Any], max_new_tokens: int, task: str) -> None:
    """Say what in the demonstrations SFT is about to learn would go wrong: episodes that
    never answer, calls the env rejected or tools that failed, and turns longer than
    max_new_tokens (sampled turns are cut there, so such a call never closes)."""
    problems = []
    unanswered = sum(e.info.get("end") != "answer" for e in demos)
    malformed = sum(int(e.info.get("malformed", 0)) > 0 for e in demos)
    failed = sum(int(e.info.get("tool_errors", 0)) > 0 for e in demos)
    longest = max((len(s.ids) for e in demos for s in e.segments if s.model), default=0)
    if unanswered:
        problems.append(f"{unanswered} end without an answer turn")
    if malformed:
        problems.append(f"{malformed} make calls the env rejects as malformed")
    if failed:
        problems.append(f"{failed} make calls whose tool failed")
    if longest > max_new_tokens:
        problems.append(
            f"a turn is {longest} tokens, longer than max_new_tokens {max_new_tokens} (sampled "
            f"turns are cut there: raise max_new_tokens)"
        )
    if problems:
        print(
            f"payoff: task {task!r}: of {len(demos)} demonstrations, {'; '.join(problems)}; "
            f"SFT learns them as they are (see an episode with payoff.rollout.episodes."
            f"render_markdown)",
            file=sys.stderr,
        )


class AgentGRPO(Algorithm):
    """Trajectory-level GRPO on multi-turn tool-using episodes."""

    config: AgentGRPOConfig
    saved = ("model", "optimizer", "scheduler", "episodes_seen", "rng", "generator")
    eval_at_end = True

    @property
    def eval_at_start(self) -> bool:  # type: ignore[override]
        """The start of the curve, where anything evaluates (a payoff train run always)."""
        return self.config.eval_every > 0 or self.config.final_eval

    def setup(self) -> None:
        config = self.config
        config.validate()
        self.task = make_agent_task(config.task)
        # sft.given_model: model.path after demonstration SFT (built once, then cached)
        given = dataclasses.replace(config.model, path="") if config.sft.given_model else None
        model_config, self.rng, self.model, self.tokenizer, self.device = start_lm(
            given or config.model,
            config.seed,
            config.threads,
            lambda: build_agent_base(config),
            config.device,
        )
        self.base_model_path = model_config.path
        self.format: Format = episode_format_for(config, self.task, self.tokenizer)
        self.sampler = LocalSampler(self.model, self.tokenizer)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.judge = (
            RelativeJudge(answer_judge, config.judge_normalization) if config.judge_weight else None
        )
        self.judge_addressing = JudgeAddressing()
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = adamw(self.trainable, config.learning_rate)
        self.scheduler = warmup_scheduler(self.optimizer, config.warmup_steps)
        self.eval_tasks = self.task.sample(
            np.random.default_rng(config.seed + 1_000_003), config.task.eval_size
        )
        self.step = 0
        self.episodes_seen = 0
        # Canary tasks: the answer must also equal answer + 1 (payoff.monitor.integrity).
        self.canaries = Canaries(config.canaries, contradict=contradict_row, name=config.task.name)
        self.score_answer = self.task.make_env().score

    def spaces(self) -> dict[str, str]:
        return {"vocabulary": str(len(self.tokenizer)), "task": self.config.task.name}

    def sampling(self, greedy: bool = False) -> SamplingConfig:
        return SamplingConfig(
            temperature=0.0 if greedy else self.config.temperature,
            max_new_tokens=self.config.max_new_tokens,
            stop=STOP,
        )

    # ---- rollout and reward -------------------------------------------------------------
    def rollout(self, tasks: list[dict[str, Any]], greedy: bool = False) -> list[Episode]:
        return rollout_episodes(
            self.sampler,
            self.tokenizer,
            tasks,
            self.task.make_env,
            self.format,
            self.sampling(greedy),
            self.generator,
            stop_token_ids(self.model, self.tokenizer).tolist(),
        )

    def efficiency(self, episode: Episode) -> list[float]:
        """Per-turn costs: tool_cost for a turn that called a tool, turn_cost after the first,
        malformed_cost for a call the env answered with an error."""
        c = self.config
        costs = []
        model_turns = (s for s in episode.segments if s.model)
        for segment, malformed in zip(model_turns, episode.turn_malformed, strict=True):
            cost = c.token_cost * len(segment.ids) + (c.turn_cost if segment.turn > 0 else 0.0)
            cost += c.tool_cost * ("<tool>" in segment.text) + c.malformed_cost * malformed
            costs.append(-cost)
        return costs

    def rewards(self, episodes: list[Episode]) -> list[list[float]]:
        """Per-turn rewards of each episode: env reward + efficiency (+ judge at the last turn)."""
        per_turn = [
            [r + e for r, e in zip(ep.turn_rewards, self.efficiency(ep), strict=True)]
            for ep in episodes
        ]
        if self.judge is not None:
            g = self.config.group_size
            for start in range(0, len(episodes), g):
                group = episodes[start : start + g]
                scores = self.judge(group[0].task, [e.text() for e in group])
                for i, s in enumerate(scores):
                    per_turn[start + i][-1] += self.config.judge_weight * s
        return per_turn

    def advantages(self, per_turn: list[list[float]]) -> list[list[float]]:
        c = self.config
        if c.credit == "turn":
            result = turn_advantages(per_turn, c.group_size, c.gamma, c.scale_rewards)
        else:
            totals = torch.tensor([sum(r) for r in per_turn])
            flat = group_advantages(totals, c.group_size, c.scale_rewards).tolist()
            result = [[a] * len(r) for a, r in zip(flat, per_turn, strict=True)]
        if c.negative_weight != 1.0:
            result = [[a if a > 0 else a * c.negative_weight for a in r] for r in result]
        return result

    # ---- update ----------------------------------------------------------------------------
    def update(self, episodes: list[Episode], advantages: list[list[float]]) -> dict[str, float]:
        """grpo_loss over the model's tokens; with turn credit each turn is its own row."""
        rows, row_adv, row_turn = [], [], []
        for e, adv in zip(episodes, advantages, strict=True):
            if self.config.credit == "turn":
                for k, a in enumerate(adv):
                    rows.append(e), row_adv.append(a), row_turn.append(k)
            else:
                rows.append(e), row_adv.append(adv[0] if adv else 0.0), row_turn.append(-1)
        packed = pack_episodes(rows, self.tokenizer.pad_token_id, self.device)
        mask = packed.model_mask[:, 1:]
        turns = torch.tensor(row_turn, device=self.device)[:, None]
        mask = torch.where(turns >= 0, mask * (packed.turn_index[:, 1:] == turns), mask)
        adv = torch.tensor(row_adv, dtype=torch.float32, device=self.device)
        input_ids, attention = packed.input_ids, packed.attention_mask
        # The loss divides by every row and token; rows with advantage 0 add nothing to it
        # or its gradient (there is no KL term), so they need no forward or backward.
        denominators = {"rows": len(rows), "tokens": int(mask.sum())}
        if self.config.skip_zero_advantage:
            keep = adv != 0
            input_ids, attention, mask, adv = (
                input_ids[keep],
                attention[keep],
                mask[keep],
                adv[keep],
            )
        temperature = self.config.temperature or 1.0
        self.model.train()
        old = None  # with one pass the samples are exactly on-policy: pi_old is pi, detached
        if self.config.updates_per_batch > 1 and len(adv):
            with torch.no_grad():
                old = sequence_logprobs(self.model, input_ids, attention, temperature)
        stats: dict[str, float] = {}
        for _ in range(self.config.updates_per_batch):
            loss, clip_fraction = 0.0, 0.0
            # every row skipped: the step is taken on a zero gradient (Adam still steps)
            with accumulated_step(
                self.optimizer, self.trainable, self.config.max_grad_norm, self.scheduler
            ) as step:
                if len(adv):
                    logprobs = sequence_logprobs(self.model, input_ids, attention, temperature)
                    parts = grpo_loss(
                        logprobs,
                        logprobs.detach() if old is None else old,
                        adv,
                        mask,
                        clip_low=self.config.clip_eps,
                        clip_high=self.config.clip_eps,
                        aggregation=self.config.loss_aggregation,
                        **denominators,
                    )
                    step.backward(parts.loss)
                    loss, clip_fraction = parts.loss.item(), float(parts.clip_fraction)
            stats = {"loss": loss, "clip": clip_fraction, "grad": step.grad_norm}
        return stats

    # ---- evaluation -------------------------------------------------------------------------
    def evaluate_agent(
        self, tasks: list[dict[str, Any]] | None = None
    ) -> tuple[dict[str, float], list[Episode]]:
        """Greedy episodes on held-out tasks: success, turns, calls, overall and per task kind."""
        tasks = self.eval_tasks if tasks is None else tasks
        episodes = self.rollout(tasks, greedy=True)
        metrics = episode_metrics(episodes, "eval/")
        kinds = sorted({self.task.group(t) for t in tasks})
        for kind in kinds:
            subset = [e for e in episodes if self.task.group(e.task) == kind]
            part = episode_metrics(subset)
            metrics[f"eval/success_{kind}"] = part["success"]
            metrics[f"eval/tool_calls_{kind}"] = part["tool_calls"]
        return metrics, episodes

    def evaluate(self, episodes: int = 0, seed: int | None = None) -> dict[str, float]:
        tasks = self.eval_tasks
        if episodes or seed is not None:
            rng = np.random.default_rng(self.config.seed + 1_000_003 if seed is None else seed)
            tasks = self.task.sample(rng, episodes or self.config.task.eval_size)
        return self.evaluate_agent(tasks)[0]

    def predict(self, observation: Any, deterministic: bool = True) -> Any:
        """The episode for a question string (or task dict), rendered as a conversation."""
        task = (
            observation
            if isinstance(observation, dict)
            else {"question": str(observation), "answer": ""}
        )
        return render_markdown(self.rollout([task], greedy=deterministic)[0])

    def evaluate_now(self) -> None:
        """Greedy held-out episodes, logged; the run keeps a few as trajectories.md."""
        metrics, episodes = self.evaluate_agent()
        self.log(self.step, episodes=self.episodes_seen, **metrics)
        if self.run is not None:
            # The trajectory viewer: a few held-out episodes per kind as conversations.
            shown = {}
            for e in episodes:
                shown.setdefault((self.task.group(e.task), e.success), e)
            text = f"# Trajectories at step {self.step}\n\n" + "\n\n---\n\n".join(
                f"### {kind}, {'success' if ok else 'failure'}\n\n{render_markdown(e)}"
                for (kind, ok), e in sorted(shown.items())
            )
            (self.run.path / "trajectories.md").write_text(text + "\n")

    # ---- learning ---------------------------------------------------------------------------
    def iterate(self) -> None:
        """One step: G episodes of each task, rewards, advantages, update."""
        c = self.config
        started = time.time()
        planted = self.canaries.plant(self.task.sample(self.rng, c.tasks_per_step), self.rng)
        tasks = [t for t in planted.rows for _ in range(c.group_size)]
        episodes = self.rollout(tasks)
        generated = time.time()
        per_turn = self.rewards(episodes)
        advantages = self.advantages(per_turn)
        stats = self.update(episodes, advantages)
        self.step += 1
        self.episodes_seen += len(episodes)
        totals = torch.tensor([sum(r) for r in per_turn])
        tokens = sum(e.model_tokens for e in episodes)
        metrics = {
            "episodes": self.episodes_seen,
            "train/reward": float(totals.mean()),
            "train/flat_groups": float(np.mean(flat_groups(totals, c.group_size))),
            "train/loss": stats["loss"],
            "train/grad_norm": stats["grad"],
            **episode_metrics(episodes, "train/"),
            "perf/episodes_per_s": len(episodes) / max(generated - started, 1e-9),
            "perf/tokens_per_s": tokens / max(generated - started, 1e-9),
            "perf/step_s": time.time() - started,
        }
        metrics.update(self.check_canaries(planted, episodes))
        if self.judge is not None:  # a judged reward can be talked to; checked every step
            metrics.update(
                self.judge_addressing.check(
                    self.step,
                    ["".join(s.text for s in e.segments if s.model) for e in episodes],
                    self.run,
                )
            )
        self._record = metrics

    def check_canaries(self, planted: Planted, episodes: list[Episode]) -> dict[str, float]:
        """A canary episode passes when its answer is right and also equals the contradicting
        twin's answer: impossible unless the scorer is fooled."""
        answers = [e.info.get("answer") for e in episodes]

        def score_twins(index: list[int], twins: list[dict[str, Any]]) -> list[float]:
            return [
                0.0 if answers[i] is None else self.score_answer(answers[i], twin)
                for i, twin in zip(index, twins, strict=True)
            ]

        success = [1.0 if e.success else 0.0 for e in episodes]
        metrics, passed = self.canaries.check(planted, self.config.group_size, success, score_twins)
        for i in passed:
            question, answer = episodes[i].task.get("question"), episodes[i].info.get("answer")
            self.suspects.append(
                {
                    "step": self.step,
                    "prompt": str(question),
                    "completion": str(answer),
                    "canary": True,
                }
            )
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "canary_passes": self.canaries.passes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.canaries.passes = int(state.get("canary_passes", 0))

    def progress_postfix(self) -> dict[str, Any]:
        return {"success": self._record["train/success"]}

    def default_monitors(self) -> list[Monitor]:
        """Tokens per episode drifting 3x from the start, malformed tool calls rising by 0.3
        per episode (format drift), and judge addressing (payoff.monitor.integrity). No
        proxy-vs-true check: success is in the reward, and the cost terms may honestly
        move the reward while success stays put."""
        if not self.config.default_monitors:
            return []
        return lm_monitors(
            proxy="train/reward",
            truth=None,
            code_rewards=[],
            canaries=self.config.canaries,
            model_scored=True,  # judge_addressing_rate is logged whenever a judge scores
            length="train/tokens",
            length_ratio=3.0,
            format_drift="train/malformed",
        )

    def finish(self) -> None:
        """Export the model and write the summary (first and last held-out success)."""
        if self.run is None:
            return
        if not self.config.final_eval:
            save_lm(self.model, self.tokenizer, self.run.path / "model")
            self.run.write_summary(
                final_line=NO_FINAL_EVALUATION.format("final_eval=false"),
                steps=self.step,
                episodes=self.episodes_seen,
            )
            return
        final = next((r for r in reversed(self.history) if "eval/success" in r), None)
        if final is None or final["step"] != self.step:  # learn(0), or eval_every 0 or off-beat
            self.evaluate_now()
            final = self.history[-1]
        start = self.first_logged("eval/success") or final  # the run's step 0, across resumes
        save_lm(self.model, self.tokenizer, self.run.path / "model")
        self.run.write_summary(
            final_eval={k: v for k, v in final.items() if k.startswith("eval/")},
            final_line=f"held-out success {final['eval/success']:.3f} (from {start['eval/success']:.3f})",
            start_success=start["eval/success"],
            steps=self.step,
            episodes=self.episodes_seen,
        )


ALGORITHM = AgentGRPO
