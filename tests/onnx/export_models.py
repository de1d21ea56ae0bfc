#!/usr/bin/python3
"""Exports the real models of kiln's ONNX tests with Debian's python3-torch (run with the system python3, which has
torch; the test venv has onnxruntime, the oracle).

  export_models.py cnn --weights models/fashion_mnist/1/model.safetensors --out cnn.onnx
      kiln's Fashion-MNIST CNN (tinygrad's beautiful_mnist, engine/nn/models.cc MnistCnn) with its trained weights,
      opset 17, dynamic batch.
  export_models.py resnet50 --out resnet50.onnx
      torchvision ResNet-50 (architecture only, torch.manual_seed(0) weights), opset 17, batch 1.
  export_models.py minilm --model-dir DIR --out minilm.onnx
      a BERT encoder (all-MiniLM-L6-v2: 6 layers, hidden 384, 12 heads) loaded from DIR's model.safetensors and
      config.json, with sentence-transformers' mean pooling and L2 normalisation in the graph; inputs input_ids and
      attention_mask (int64, dynamic batch and sequence), output sentence_embedding; opset 17.
"""

from __future__ import annotations

import argparse
import json
import math
import struct

import numpy as np
import torch
from torch import nn


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(body[a:b], dtype=dtypes[info["dtype"]]).reshape(info["shape"]).copy()
    return out


def export(model: nn.Module, args: tuple, path: str, names_in: list[str], names_out: list[str], dynamic: dict) -> None:
    model.eval()
    with torch.no_grad():
        torch.onnx.export(model, args, path, opset_version=17, input_names=names_in, output_names=names_out,
                          dynamic_axes=dynamic, do_constant_folding=True)


def cnn_model(weights: str) -> nn.Module:
    w = read_safetensors(weights)
    layers = nn.Sequential(
        nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 32, 5), nn.ReLU(), nn.BatchNorm2d(32, eps=1e-5), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(), nn.BatchNorm2d(64, eps=1e-5), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(576, 10))
    state = {}
    for k, v in w.items():
        state[k.replace("layers.", "")] = torch.from_numpy(v)
    for i in (4, 10):  # BatchNorm2d also keeps a batch counter
        state[f"{i}.num_batches_tracked"] = torch.tensor(0)
    layers.load_state_dict(state)
    return layers


def cnn(weights: str, out: str) -> None:
    export(cnn_model(weights), (torch.zeros(1, 1, 28, 28),), out, ["INPUT"], ["OUTPUT"], {"INPUT": {0: "batch"}, "OUTPUT": {0: "batch"}})


def resnet50_model() -> nn.Module:
    import torchvision
    torch.manual_seed(0)
    return torchvision.models.resnet50(weights=None)


def resnet50(out: str) -> None:
    export(resnet50_model(), (torch.zeros(1, 3, 224, 224),), out, ["input"], ["logits"], {})


class Bert(nn.Module):
    """BertModel's encoder (post-LN) with mean pooling over the attention mask and L2 normalisation."""

    def __init__(self, cfg: dict):
        super().__init__()
        h, self.heads = cfg["hidden_size"], cfg["num_attention_heads"]
        self.word = nn.Embedding(cfg["vocab_size"], h)
        self.pos = nn.Embedding(cfg["max_position_embeddings"], h)
        self.tok = nn.Embedding(cfg["type_vocab_size"], h)
        self.ln = nn.LayerNorm(h, eps=cfg["layer_norm_eps"])
        self.layers = nn.ModuleList()
        for _ in range(cfg["num_hidden_layers"]):
            self.layers.append(nn.ModuleDict({
                "q": nn.Linear(h, h), "k": nn.Linear(h, h), "v": nn.Linear(h, h), "o": nn.Linear(h, h),
                "ln1": nn.LayerNorm(h, eps=cfg["layer_norm_eps"]), "up": nn.Linear(h, cfg["intermediate_size"]),
                "down": nn.Linear(cfg["intermediate_size"], h), "ln2": nn.LayerNorm(h, eps=cfg["layer_norm_eps"])}))

    def forward(self, input_ids, attention_mask):
        b, s = input_ids.shape
        positions = torch.arange(s, device=input_ids.device).unsqueeze(0)
        x = self.ln(self.word(input_ids) + self.pos(positions) + self.tok(torch.zeros_like(input_ids)))
        bias = (1.0 - attention_mask.to(x.dtype))[:, None, None, :] * -10000.0
        d = x.shape[-1] // self.heads
        for L in self.layers:
            def split(t):
                return t.view(b, s, self.heads, d).transpose(1, 2)
            q, k, v = split(L["q"](x)), split(L["k"](x)), split(L["v"](x))
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + bias, dim=-1)
            ctx = (att @ v).transpose(1, 2).reshape(b, s, -1)
            x = L["ln1"](x + L["o"](ctx))
            x = L["ln2"](x + L["down"](torch.nn.functional.gelu(L["up"](x))))
        m = attention_mask.to(x.dtype).unsqueeze(-1)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return pooled / pooled.norm(dim=-1, keepdim=True).clamp(min=1e-12)


def minilm(model_dir: str, out: str) -> None:
    cfg = json.load(open(f"{model_dir}/config.json"))
    w = read_safetensors(f"{model_dir}/model.safetensors")
    m = Bert(cfg)
    p = "" if "embeddings.word_embeddings.weight" in w else "bert."
    g = lambda k: torch.from_numpy(w[p + k].astype(np.float32))  # noqa: E731
    with torch.no_grad():
        m.word.weight.copy_(g("embeddings.word_embeddings.weight"))
        m.pos.weight.copy_(g("embeddings.position_embeddings.weight"))
        m.tok.weight.copy_(g("embeddings.token_type_embeddings.weight"))
        m.ln.weight.copy_(g("embeddings.LayerNorm.weight"))
        m.ln.bias.copy_(g("embeddings.LayerNorm.bias"))
        for i, L in enumerate(m.layers):
            e = f"encoder.layer.{i}."
            pairs = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
                     "o": "attention.output.dense", "ln1": "attention.output.LayerNorm", "up": "intermediate.dense",
                     "down": "output.dense", "ln2": "output.LayerNorm"}
            for mine, theirs in pairs.items():
                L[mine].weight.copy_(g(e + theirs + ".weight"))
                L[mine].bias.copy_(g(e + theirs + ".bias"))
    ids = torch.ones(1, 8, dtype=torch.int64)
    export(m, (ids, torch.ones_like(ids)), out, ["input_ids", "attention_mask"], ["sentence_embedding"],
           {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
            "sentence_embedding": {0: "batch"}})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["cnn", "resnet50", "minilm"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--weights")
    ap.add_argument("--model-dir")
    a = ap.parse_args()
    if a.what == "cnn":
        cnn(a.weights, a.out)
    elif a.what == "resnet50":
        resnet50(a.out)
    else:
        minilm(a.model_dir, a.out)


if __name__ == "__main__":
    main()
