"""Language models: the device key, precision, gradient checkpointing, chat templates, LoRA
adapters saved alone, loading as data (safetensors only, no remote code), no deprecation
warnings. Everything runs on the CPU; the GPU path is untested here."""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch

pytest.importorskip("transformers", reason="the llm extra is not installed")

from payoff.algos.agent_grpo import AgentGRPO, AgentGRPOConfig
from payoff.algos.best_of_n import BestOfNConfig
from payoff.algos.dpo import DPO, DPOConfig
from payoff.algos.grpo import GRPO, GRPOConfig
from payoff.algos.reward_model import RewardModelConfig
from payoff.algos.rlhf_ppo import RLHFPPOConfig
from payoff.algos.sft import SFT, SFTConfig
from payoff.core.config import from_dict
from payoff.core.errors import ConfigError
from payoff.envs.text.formats import ChatTemplateFormat, PlainFormat
from payoff.models.chat import completion_text, prompt_text, uses_chat_template
from payoff.models.lm import ModelConfig, autocast_decoder, load_lm, save_lm
from payoff.models.logprobs import completion_logprobs
from payoff.models.transformers_compat import is_checkpointing, quiet_peft_wrap
from payoff.rollout.generation import LocalSampler, SamplingConfig
from payoff.track.run import Run

# A Jinja chat template made of characters the tiny model's tokenizer knows.
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
LM_CONFIGS = [
    SFTConfig,
    GRPOConfig,
    DPOConfig,
    RewardModelConfig,
    RLHFPPOConfig,
    BestOfNConfig,
    AgentGRPOConfig,
]


@pytest.fixture(scope="module")
def fresh_model_dir(tmp_path_factory):
    """An untrained tiny model in HF format: runs start from it and skip pretraining."""
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    return str(save_lm(model, tokenizer, tmp_path_factory.mktemp("fresh") / "model"))


@pytest.fixture(scope="module")
def templated_model_dir(tmp_path_factory):
    """The same tiny model whose tokenizer_config.json carries a chat template."""
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    folder = save_lm(model, tokenizer, tmp_path_factory.mktemp("templated") / "model")
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["chat_template"] = TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    return str(folder)


def _grpo(model_dir: str, **extra) -> GRPO:
    settings = {
        "model": {"path": model_dir},
        "prompts_per_step": 2,
        "group_size": 2,
        "max_new_tokens": 3,
        "steps": 1,
        "eval_every": 1,
        "checkpoint_every": 1,
        "final_eval_k": [1],
        "task": {"eval_size": 4},
        "rewards": [_digit_share],
        "device": "cpu",
    }
    settings.update(extra)
    return GRPO(**settings)


def _digit_share(prompts, completions, **columns):
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def _first_character(prompts, completions, **columns):
    """A reward that differs between almost any two samples: no group is flat."""
    return [ord(text[0]) / 128 if text else 0.0 for text in completions]


# ---- (5) the device key -----------------------------------------------------------------------
@pytest.mark.parametrize("config_class", LM_CONFIGS, ids=lambda c: c.__name__)
def test_every_lm_trainer_has_a_device_key_defaulting_to_auto(config_class):
    assert config_class().device == "auto"
    assert from_dict(config_class, {"device": "cpu"}).device == "cpu"
    with pytest.raises(ConfigError, match="'device' must be auto, cpu, cuda, cuda:N or mps"):
        from_dict(config_class, {"device": "gpu"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_an_absent_device_is_refused_by_name_before_any_work(fresh_model_dir):
    with pytest.raises(ConfigError, match="device 'cuda:1' is not available"):
        _grpo(fresh_model_dir, device="cuda:1")


def test_sft_on_the_cpu_device_gives_float_metrics_and_cpu_checkpoints(fresh_model_dir):
    sft = SFT(
        model={"path": fresh_model_dir},
        device="cpu",
        steps=2,
        batch_size=4,
        log_every=1,
        eval_every=2,
        task={"eval_size": 4},
    )
    assert sft.device == torch.device("cpu")
    sft.learn()
    record = next(r for r in sft.history if "train/loss" in r)
    assert all(isinstance(v, int | float) for v in record.values())
    state = sft.state_dict()
    assert all(t.device.type == "cpu" for t in state["model"].values())
    # a copy, not the live weights: the checkpoint does not move with training
    name, saved = next(iter(state["model"].items()))
    assert saved.data_ptr() != sft.model.state_dict()[name].data_ptr()


# ---- (5) precision: autocast and gradient checkpointing ----------------------------------------
def _completion_batch(tokenizer):
    """Two groups of two completions sharing a prompt: prompts left-, completions right-padded."""
    prompts = tokenizer(["12+34=", "12+34=", "7+8=", "7+8="], padding=True, return_tensors="pt")
    tokenizer.padding_side = "right"
    try:
        completions = tokenizer(["46", "47", "15", "1"], padding=True, return_tensors="pt")
    finally:
        tokenizer.padding_side = "left"
    return (
        prompts["input_ids"],
        prompts["attention_mask"],
        completions["input_ids"],
        completions["attention_mask"],
    )


def _loss_and_grads(model, batch, group_size):
    model.train()
    model.zero_grad(set_to_none=True)
    out = completion_logprobs(model, *batch, group_size=group_size)
    loss = -(out.logprobs * batch[3]).sum() / batch[3].sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(lora):
    extra = {"lora_rank": 4} if lora else {}
    plain, tokenizer = load_lm(ModelConfig(**extra), seed=0)
    checkpointed, _ = load_lm(ModelConfig(gradient_checkpointing=True, **extra), seed=0)
    if lora:  # adapters off zero, so both kinds get a gradient; the same in both models
        with torch.no_grad():
            for name, p in plain.named_parameters():
                if "lora_B" in name:
                    p.fill_(0.01)
        checkpointed.load_state_dict(plain.state_dict())
    # the layers really recompute: count the checkpoint calls
    calls = []
    for module in checkpointed.modules():
        if getattr(module, "gradient_checkpointing", False):
            inner = module._gradient_checkpointing_func

            def counted(*args, _inner=inner, **kwargs):
                calls.append(1)
                return _inner(*args, **kwargs)

            module._gradient_checkpointing_func = counted
    batch = _completion_batch(tokenizer)
    expected_loss, expected = _loss_and_grads(plain, batch, group_size=2)  # shared prompts
    loss, grads = _loss_and_grads(checkpointed, batch, group_size=2)  # falls back to rows
    assert is_checkpointing(checkpointed) and not is_checkpointing(plain)
    assert len(calls) == 4  # one per decoder layer of the tiny model
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == expected.keys() and grads
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected[name], rtol=1e-4, atol=1e-6, msg=name)
    # SFT's plain forward with labels, too
    ids = tokenizer(["12+34=46"], return_tensors="pt")["input_ids"]
    for model in (plain, checkpointed):
        model.zero_grad(set_to_none=True)
    losses = [m(input_ids=ids, labels=ids, use_cache=False).loss for m in (plain, checkpointed)]
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    # generation (eval mode) keeps its cache and works as before
    sampler = LocalSampler(checkpointed, tokenizer)
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=4)
    assert (
        sampler.generate(["12+34="], greedy).completions
        == LocalSampler(plain, tokenizer).generate(["12+34="], greedy).completions
    )


def test_a_grpo_run_with_gradient_checkpointing_trains(fresh_model_dir):
    grpo = _grpo(
        fresh_model_dir,
        model={"path": fresh_model_dir, "gradient_checkpointing": True},
        rewards=[_first_character],
        group_size=4,
    )
    before = [p.detach().clone() for p in grpo.model.parameters()]
    grpo.iterate()
    assert any(not torch.equal(a, b) for a, b in zip(before, grpo.model.parameters(), strict=True))
    assert not grpo.model.config.use_cache  # training forwards ask for no cache


def test_autocast_runs_the_decoder_in_bfloat16_and_keeps_float32_weights_and_logits():
    model, tokenizer = load_lm(ModelConfig(autocast=True), seed=0)  # CPU: autocast is ignored
    seen: list[torch.dtype] = []
    projection = model.model.layers[0].self_attn.q_proj
    projection.register_forward_hook(lambda m, a, out: seen.append(out.dtype))
    ids = tokenizer(["12+34="], return_tensors="pt")["input_ids"]
    model(input_ids=ids)
    assert seen == [torch.float32]
    # what a CUDA device gets, shown on the CPU's own bfloat16 autocast
    autocast_decoder(model, "cpu", torch.bfloat16)
    logits = model(input_ids=ids).logits
    assert seen[-1] == torch.bfloat16 and logits.dtype == torch.float32
    logits.sum().backward()
    assert projection.weight.dtype == torch.float32 and projection.weight.grad is not None
    copy.deepcopy(model)(input_ids=ids)  # the frozen reference's copy keeps it
    assert seen[-1] == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")  # and leaves it after each call


# ---- (6) chat templates -----------------------------------------------------------------------
def test_chat_template_renders_prompts_and_completions():
    _, tokenizer = load_lm(ModelConfig(), seed=0)
    assert not uses_chat_template(tokenizer, "auto")  # the tiny model has none
    tokenizer.chat_template = TEMPLATE
    assert uses_chat_template(tokenizer, "auto") and not uses_chat_template(tokenizer, "none")
    row = {
        "prompt": "user: hi\nassistant: ",
        "prompt_messages": [{"role": "user", "content": "hi"}],
    }
    assert prompt_text(tokenizer, row, True) == "<|user|>hi<|end|>\n<|assistant|>"
    assert prompt_text(tokenizer, {"prompt": "2+2="}, True) == "<|user|>2+2=<|end|>\n<|assistant|>"
    assert completion_text(tokenizer, row, "4", True) == "4<|end|>\n"
    assert prompt_text(tokenizer, row, False) == row["prompt"]
    assert completion_text(tokenizer, row, "4", False) == "4"
    assert prompt_text(tokenizer, {"prompt": ""}, True) == ""  # plain text rows stay plain


def _spy_on_sampling(monkeypatch) -> list[str]:
    seen: list[str] = []
    original = LocalSampler.generate

    def generate(self, prompts, *args, **kwargs):
        seen.extend(prompts)
        return original(self, prompts, *args, **kwargs)

    monkeypatch.setattr(LocalSampler, "generate", generate)
    return seen


@pytest.mark.parametrize("mode", ["auto", "none"])
def test_grpo_feeds_templated_prompts_and_rewards_read_the_rows(
    templated_model_dir, monkeypatch, mode
):
    seen = _spy_on_sampling(monkeypatch)
    rewarded: list[str] = []

    def record(prompts, completions, **columns):
        rewarded.extend(prompts)
        return [0.0] * len(prompts)

    grpo = _grpo(
        templated_model_dir,
        model={"path": templated_model_dir, "chat_template": mode},
        rewards=[record],
    )
    grpo.iterate()
    grpo.predict("3+4=")
    assert seen and rewarded
    assert not any("<|" in p for p in rewarded)  # reward functions get the rows' own prompts
    if mode == "auto":
        assert all(p.startswith("<|user|>") and p.endswith("<|assistant|>") for p in seen)
        assert seen[-1] == "<|user|>3+4=<|end|>\n<|assistant|>"
    else:
        assert not any("<|" in p for p in seen) and seen[-1] == "3+4="


def test_plain_tiny_model_prompts_are_unchanged(fresh_model_dir, monkeypatch):
    seen = _spy_on_sampling(monkeypatch)
    grpo = _grpo(fresh_model_dir)
    assert not grpo.chat_template
    rows, *_ = grpo.rollout()
    assert seen == [r["prompt"] for r in rows]


def test_sft_examples_go_through_the_template(templated_model_dir, tmp_path):
    data = tmp_path / "chat.jsonl"
    data.write_text(
        json.dumps(
            {
                "prompt": [{"role": "user", "content": "2+2="}],
                "completion": [{"role": "assistant", "content": "4"}],
            }
        )
        + "\n"
    )
    task = {"name": "jsonl", "data": str(data), "test_data": str(data), "eval_size": 1}
    sft = SFT(model={"path": templated_model_dir}, task=task, device="cpu", steps=1)
    rows = sft.task.sample(sft.rng, 1)
    batch = sft.batch(rows)
    tokenizer = sft.tokenizer
    text = tokenizer.decode(batch["input_ids"][0], skip_special_tokens=True)
    assert text == "<|user|>2+2=<|end|>\n<|assistant|>4<|end|>\n"
    labels = batch["labels"][0]
    learned = tokenizer.decode(labels[labels >= 0], skip_special_tokens=False)
    assert learned == "4<|end|>\n" + tokenizer.eos_token  # the assistant's turn only
    plain = SFT(model={"path": templated_model_dir, "chat_template": "none"}, task=task, steps=1)
    text = tokenizer.decode(plain.batch(rows)["input_ids"][0], skip_special_tokens=True)
    assert text == "user: 2+2=\nassistant: 4"  # the dataset's plain rendering


def test_dpo_pairs_go_through_the_template(templated_model_dir):
    dpo = DPO(
        model={"path": templated_model_dir},
        device="cpu",
        preferences={"train_pairs": 8, "test_pairs": 4},
    )
    row = dpo.train_rows[0]
    assert row["prompt"].startswith("<|user|>") and row["prompt"].endswith("<|assistant|>")
    assert row["chosen"].endswith("<|end|>\n") and row["rejected"].endswith("<|end|>\n")


def test_the_reward_model_reads_plain_text_and_says_so(templated_model_dir, capsys):
    from payoff.algos.reward_model import RewardModel

    preferences = {"train_pairs": 8, "test_pairs": 4}
    RewardModel(model={"path": templated_model_dir}, device="cpu", preferences=preferences)
    assert "the reward model reads each pair as plain text" in capsys.readouterr().err
    RewardModel(
        model={"path": templated_model_dir, "chat_template": "none"},
        device="cpu",
        preferences=preferences,
    )
    assert "plain text" not in capsys.readouterr().err  # asked for: nothing to say


def test_agent_chat_template_key_still_takes_a_bool(fresh_model_dir, templated_model_dir):
    assert from_dict(AgentGRPOConfig, {"chat_template": True}).chat_template is True
    assert from_dict(AgentGRPOConfig, {"chat_template": False}).chat_template is False
    agent = AgentGRPO(model={"path": fresh_model_dir}, device="cpu")
    assert isinstance(agent.format, PlainFormat)  # null follows model.chat_template: none here
    with pytest.raises(ConfigError, match="'chat_template' is true but the model's tokenizer"):
        AgentGRPO(model={"path": fresh_model_dir}, chat_template=True)
    templated = AgentGRPO(model={"path": templated_model_dir}, device="cpu")
    assert isinstance(templated.format, ChatTemplateFormat)
    forced_plain = AgentGRPO(model={"path": templated_model_dir}, chat_template=False)
    assert isinstance(forced_plain.format, PlainFormat)


# ---- (6) LoRA adapters, loading as data ---------------------------------------------------------
def test_lora_saves_the_adapter_alone_in_peft_format(tmp_path):
    from peft import PeftModel

    model, tokenizer = load_lm(ModelConfig(lora_rank=4), seed=0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.02)
    folder = save_lm(model, tokenizer, tmp_path / "model")
    adapter = folder / "adapter"
    assert (adapter / "adapter_config.json").is_file()
    assert (adapter / "adapter_model.safetensors").is_file()
    assert (folder / "model.safetensors").is_file()  # the merged model beside it
    base, _ = load_lm(ModelConfig(), seed=0)
    # (peft itself reads a property transformers deprecated; quiet_peft_wrap hides just that)
    restored = quiet_peft_wrap(PeftModel.from_pretrained, base, str(adapter))
    ids = tokenizer(["12+34="], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(
            restored(input_ids=ids).logits, model(input_ids=ids).logits, rtol=0, atol=1e-5
        )


def test_a_pickled_model_is_refused_with_how_to_convert(tmp_path, fresh_model_dir):
    import shutil

    folder = tmp_path / "pickled"
    shutil.copytree(fresh_model_dir, folder)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(ConfigError) as caught:
        load_lm(ModelConfig(path=str(folder)))
    message = str(caught.value)
    assert "pytorch_model.bin" in message and "safetensors only" in message
    assert "save_pretrained" in message  # how to convert


@pytest.mark.parametrize("trust", [False, True])
def test_models_load_as_data_unless_remote_code_is_trusted(fresh_model_dir, monkeypatch, trust):
    import transformers

    calls: list[dict] = []
    original = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    load_lm(ModelConfig(path=fresh_model_dir, trust_remote_code=trust))
    assert calls[0]["trust_remote_code"] is trust and calls[0]["use_safetensors"] is True
    assert ModelConfig().trust_remote_code is False


# ---- (6) no deprecation warnings ----------------------------------------------------------------
@pytest.mark.parametrize(
    "model_extra", [{}, {"lora_rank": 4, "gradient_checkpointing": True}], ids=["full", "lora-gc"]
)
def test_a_short_grpo_run_raises_no_deprecation_warning(tmp_path, fresh_model_dir, model_extra):
    run = Run.create(tmp_path, "quiet", {"algo": "grpo"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        grpo = _grpo(
            fresh_model_dir,
            run=run,
            steps=2,
            updates_per_batch=2,  # pi_old from a separate pass, and shuffled minibatches
            minibatch_size=2,
            beta=0.05,  # a reference model too
            model={"path": fresh_model_dir, **model_extra},
        )
        grpo.learn()
    run.close()
    assert (run.path / "model" / "model.safetensors").is_file()
    if model_extra:
        assert (run.path / "model" / "adapter" / "adapter_config.json").is_file()
