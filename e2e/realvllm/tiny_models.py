"""Tiny scoring models built deterministically from the packaged all-MiniLM-L6-v2, as Hugging Face folders.

No small cross-encoder, ColBERT or token classifier ships in a package here, so the real_vllm tier builds them:
MiniLM's backbone unchanged (all six layers: its [CLS] vector barely moves across inputs before the last one,
std 0.0009 after two layers, 0.16 after six) under a head drawn from ``torch.Generator().manual_seed(seed)``,
scaled so the outputs spread (a head at transformers' 0.02 initialisation would give every pair a score within
1e-3 of 0.5). The same seed gives the same bytes; another seed another head.

    <runtime python> e2e/realvllm/tiny_models.py OUT_DIR [--seed N] [--only NAME ...]
        -> {"<name>": {"dir", "architecture", "sha256"}, ...} on stdout; OUT_DIR/<name>/ each a model folder

``cross-encoder``   BertForSequenceClassification, one label (vLLM: classify; /score and /rerank)
``colbert``         HF_ColBERT: the BERT backbone and a ``linear`` projection to ``COLBERT_DIM`` (vLLM: token_embed).
                    Its config names no ``dim``: vLLM 0.32 reads the size from ``linear.weight``; with ``dim`` set its
                    ColBERTModel fails to start ("cannot assign module before Module.__init__() call",
                    colbert.py:207, the projection is built before nn.Module.__init__), as colbertv2.0's own
                    config has none
``token-classifier`` BertForTokenClassification, ``TOKEN_LABELS`` labels (vLLM: token_classify)
``sparse-head``     BertForTokenClassification, one label: one weight a token (vLLM: token_classify, which answers
                    the sigmoid of a one-label logit, model_executor/layers/pooler/activations.py:138-141 in 0.32), a
                    PoolingService's ``vectors.outputs: [sparse]``
``dual-encoder``    CLIPModel (a text and a vision tower of two layers, 64 wide, 32-pixel images in 8-pixel patches,
                    all drawn from the seed) with MiniLM's tokenizer, whose pad token moves off id 0: vLLM's CLIP
                    processor uses id 0 as the image placeholder and asserts it is no special token (clip.py:228 in
                    0.32). Head size 32, as MiniLM's (the CPU attention takes no 16), and a projection as wide as the
                    text tower (clip.py:926 refuses a narrower one). vLLM: embed, images and texts

Like oracles.py this file imports nothing from the repository: it runs in the runtime's virtual environment.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

COLBERT_DIM = 32
TOKEN_LABELS = 3
HEAD_GAIN = 4.0  # head weights ~ N(0, (gain / sqrt(fan_in))^2): logits of a few units, not of a few hundredths
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")

BUILDS = {
    "cross-encoder": "BertForSequenceClassification",
    "colbert": "HF_ColBERT",
    "token-classifier": "BertForTokenClassification",
    "sparse-head": "BertForTokenClassification",
    "dual-encoder": "CLIPModel",
}
CLIP_WIDTH = 64
CLIP_IMAGE = 32


def _backbone(source: Path, pooler: bool) -> dict:
    """MiniLM's weights under ``bert.`` (its pooler only where the head reads it)."""
    from safetensors.torch import load_file

    keep = {}
    for name, tensor in load_file(str(source / "model.safetensors")).items():
        if name.startswith("pooler.") and not pooler:
            continue
        elif name == "embeddings.position_ids":
            continue
        keep[f"bert.{name}"] = tensor.contiguous()
    return keep


def _head(gen, rows: int, cols: int, bias: bool) -> dict:
    import torch

    w = torch.randn(rows, cols, generator=gen, dtype=torch.float32) * (HEAD_GAIN / cols**0.5)
    out = {"weight": w}
    if bias:
        out["bias"] = torch.randn(rows, generator=gen, dtype=torch.float32) * 0.1
    return out


def _dual_encoder(source: Path, folder: Path, seed: int) -> None:
    import torch
    from transformers import AutoTokenizer, CLIPConfig, CLIPImageProcessorPil, CLIPModel, CLIPProcessor

    tok = AutoTokenizer.from_pretrained(source)
    tok.pad_token = "[unused0]"
    tower = {"hidden_size": CLIP_WIDTH, "intermediate_size": 2 * CLIP_WIDTH, "num_hidden_layers": 2,
             "num_attention_heads": CLIP_WIDTH // 32, "projection_dim": CLIP_WIDTH}  # fmt: skip
    config = CLIPConfig(
        text_config={**tower, "vocab_size": tok.vocab_size, "max_position_embeddings": 77, "eos_token_id": tok.sep_token_id,
                     "bos_token_id": tok.cls_token_id, "pad_token_id": tok.pad_token_id},
        vision_config={**tower, "image_size": CLIP_IMAGE, "patch_size": 8},
        projection_dim=CLIP_WIDTH,
    )  # fmt: skip
    torch.manual_seed(seed)
    CLIPModel(config).eval().save_pretrained(folder, safe_serialization=True)
    pixels = {"shortest_edge": CLIP_IMAGE}
    CLIPProcessor(image_processor=CLIPImageProcessorPil(size=pixels, crop_size={"height": CLIP_IMAGE, "width": CLIP_IMAGE}),
                  tokenizer=tok).save_pretrained(folder)  # fmt: skip


def build(name: str, source: Path, out: Path, seed: int) -> dict:
    import torch
    from safetensors.torch import save_file

    if name == "dual-encoder":
        folder = out / name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        _dual_encoder(source, folder, seed)
        digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
        return {"dir": str(folder), "architecture": BUILDS[name], "sha256": digest}

    arch = BUILDS[name]
    config = json.loads((source / "config.json").read_text())
    config.pop("_name_or_path", None)
    config.update({"architectures": [arch], "torch_dtype": "float32"})
    hidden = config["hidden_size"]
    gen = torch.Generator().manual_seed(seed)
    if name == "cross-encoder":
        tensors = _backbone(source, pooler=True)
        tensors |= {f"classifier.{k}": v for k, v in _head(gen, 1, hidden, bias=True).items()}
        config.update({"num_labels": 1, "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}})
    elif name == "colbert":
        tensors = _backbone(source, pooler=False)
        tensors["linear.weight"] = _head(gen, COLBERT_DIM, hidden, bias=False)["weight"]
    else:
        count = 1 if name == "sparse-head" else TOKEN_LABELS
        tensors = _backbone(source, pooler=False)
        tensors |= {f"classifier.{k}": v for k, v in _head(gen, count, hidden, bias=True).items()}
        labels = [f"TAG_{i}" for i in range(count)]
        config.update({"id2label": dict(enumerate(labels)), "label2id": {v: i for i, v in enumerate(labels)}})
    folder = out / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for f in TOKENIZER_FILES:
        if (source / f).exists():
            shutil.copy2(source / f, folder / f)
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    return {"dir": str(folder), "architecture": arch, "sha256": digest}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--source", type=Path, required=True, help="the packaged all-MiniLM-L6-v2 folder")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", action="append", choices=sorted(BUILDS))
    args = ap.parse_args(argv)
    built = {n: build(n, args.source, args.out, args.seed) for n in (args.only or BUILDS)}
    json.dump(built, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
