"""Hugging Face causal LMs from a local folder: tiny random Llama/GPT-2 saved with save_pretrained, loaded,
sampled with the batched KV-cache sampler, served through the official openai SDK. Nothing from a hub."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers  # make setup installs the hf extra: a missing one fails here, not a silent skip

from envfarm.testing.tiny_hf import bpe_tokenizer
from envfarm.trainer.generate import generate
from envfarm.trainer.policy import load_policy, save_policy
from envfarm.trainer.server import PolicyServer

torch.set_num_threads(2)

CHATML = ("{% for m in messages %}{% if m['role'] == 'bad' %}{{ raise_exception('no bad role') }}{% endif %}"
          "<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}"
          "{% if m.get('tool_calls') %}{% for c in m['tool_calls'] %}<tool_call>\n"
          "{{ c['function'] | tojson }}\n</tool_call>{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
          "{% if tools %}<|im_start|>system\ntools: {% for t in tools %}{{ t['function']['name'] }} "
          "{% endfor %}<|im_end|>\n{% endif %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TOOLS = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object", "properties": {
    "expr": {"type": "string"}}}}}]


def _save(folder: Path, kind: str, chat_template: str | None) -> Path:
    tok = bpe_tokenizer(chat_template)
    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                       max_position_embeddings=256, eos_token_id=tok.eos_token_id)
        model = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=2, n_positions=256,
                                      eos_token_id=tok.eos_token_id)
        model = transformers.GPT2LMHeadModel(cfg)
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


@pytest.mark.parametrize(("kind", "template"), [("llama", CHATML), ("gpt2", None)])
def test_load_generate_and_logprobs(tmp_path: Path, kind: str, template: str | None) -> None:
    policy = load_policy(path=_save(tmp_path / kind, kind, template), device="cpu")
    assert policy.spec.kind == "hf" and policy.max_context == 256
    messages = [{"role": "user", "content": "What is 3*4?"}]
    prompt = policy.encode_prompt(messages, TOOLS)
    text = policy.tokenizer.decode(prompt)
    assert ("<|im_start|>assistant\n" in text and "tools: calc" in text) if template else "User: " in text
    short = policy.encode_prompt([{"role": "user", "content": "Hi"}])
    out = generate(policy, [prompt, short], n=2, max_tokens=12, generator=torch.Generator().manual_seed(0))
    for ids, samples in zip([prompt, short], out, strict=True):
        for s in samples:
            full = torch.tensor([ids + list(s.token_ids)])
            with torch.no_grad():
                logp = torch.log_softmax(policy.module(full).float(), -1)[0]
            rec = [logp[len(ids) - 1 + i, t].item() for i, t in enumerate(s.token_ids)]
            assert max(abs(a - b) for a, b in zip(rec, s.logprobs, strict=True)) < 1e-4
    completion = policy.encode_completion({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "3*4"}'}}]})
    assert completion[-1] == policy.tokenizer.eos_id
    assert policy.parse_completion(completion).tool_calls[0].name == "calc"


async def test_serve_one_request_and_checkpoint_round_trip(tmp_path: Path) -> None:
    import openai

    policy = load_policy(path=_save(tmp_path / "m", "llama", CHATML), device="cpu")
    server = PolicyServer(policy)
    await server.start("127.0.0.1", 0)
    try:
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x")
        reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                                     tools=TOOLS, max_tokens=8, logprobs=True, seed=3)
        with pytest.raises(openai.BadRequestError, match="no bad role"):
            await client.chat.completions.create(model="m", messages=[{"role": "bad", "content": "x"}])
        await client.close()
    finally:
        await server.stop()
    choice = reply.choices[0]
    assert len(choice.token_ids) == len(choice.logprobs.content) >= 1
    assert reply.weight_version == 0 and reply.prompt_token_ids
    save_policy(policy, tmp_path / "ckpt")
    again = load_policy(path=tmp_path / "ckpt", device="cpu")
    ids = torch.tensor([reply.prompt_token_ids])
    with torch.no_grad():
        torch.testing.assert_close(again.module(ids), policy.module(ids))
