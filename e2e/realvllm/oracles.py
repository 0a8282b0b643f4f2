"""Reference answers from the model's own libraries, run by the vLLM runtime's interpreter (not ours).

    <runtime python> e2e/realvllm/oracles.py embed MODEL_DIR < {"sentences": [...]}
        -> {"vectors": [[...], ...]}            sentence-transformers' encode (its own pooling and normalise)
    <runtime python> e2e/realvllm/oracles.py label-probs MODEL_DIR < {"query", "items", "labels", "itemFirst", "applySoftmax"}
        -> {"scores": [...]}                   transformers: next-token distribution after the token ids of the
                                               query (with special tokens) then the item (without; the other way
                                               round when itemFirst); softmax over the label ids only when
                                               applySoftmax, else the full-vocabulary probability; score = label 0

This file imports nothing from the repository: it runs in the runtime's virtual environment.
"""

from __future__ import annotations

import json
import sys


def embed(model_dir: str, req: dict) -> dict:
    from sentence_transformers import SentenceTransformer

    m = SentenceTransformer(model_dir, device="cpu")
    vectors = m.encode(req["sentences"], convert_to_numpy=True, normalize_embeddings=False)
    return {"vectors": [[float(x) for x in v] for v in vectors]}


def label_probs(model_dir: str, req: dict) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.eval()
    labels = req["labels"]
    scores = []
    for item in req["items"]:
        # query tokenized with special tokens, the item without, joined as token ids
        q = tok.encode(req["query"], add_special_tokens=True)
        i = tok.encode(item, add_special_tokens=False)
        ids = torch.tensor([i + q if req.get("itemFirst") else q + i])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, -1].to(torch.float64)
        if req.get("applySoftmax", True):
            probs = torch.softmax(logits[labels], dim=-1)
            scores.append(float(probs[0]))
        else:
            scores.append(float(torch.softmax(logits, dim=-1)[labels[0]]))
    return {"scores": scores}


def main() -> int:
    cmd, model_dir = sys.argv[1], sys.argv[2]
    req = json.load(sys.stdin)
    out = {"embed": embed, "label-probs": label_probs}[cmd](model_dir, req)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
