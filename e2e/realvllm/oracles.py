"""Reference answers from the model's own libraries, run by the vLLM runtime's interpreter (not ours).

    <runtime python> e2e/realvllm/oracles.py embed MODEL_DIR < {"sentences": [...]}
        -> {"vectors": [[...], ...]}            sentence-transformers' encode (its own pooling and normalise)
    <runtime python> e2e/realvllm/oracles.py label-probs MODEL_DIR < {"query", "items", "labels", "itemFirst", "applySoftmax"}
        -> {"scores": [...]}                   transformers: next-token distribution after the token ids of the
                                               query (with special tokens) then the item (without; the other way
                                               round when itemFirst); softmax over the label ids only when
                                               applySoftmax, else the full-vocabulary probability; score = label 0
    <runtime python> e2e/realvllm/oracles.py hidden-states MODEL_DIR < {"files": [...], "layers": [...]}
        -> {"layers": {id: min cosine}, "last_after_norm": min cosine, "tokens": [[...], ...],
            "dtypes": [...], "shapes": [...]}  each file's token_ids through transformers with
                                               output_hidden_states: id k < num_hidden_layers against
                                               hidden_states[k]; id = num_hidden_layers against the input of the
                                               final norm (vLLM's EAGLE-3 convention), and, for contrast, against
                                               hidden_states[-1] (after the norm)
    <runtime python> e2e/realvllm/oracles.py cross-encoder MODEL_DIR < {"pairs": [[query, document], ...]}
        -> {"scores": [...]}                   sentence-transformers' CrossEncoder.predict (one label: its sigmoid)
    <runtime python> e2e/realvllm/oracles.py late-interaction MODEL_DIR < {"texts": [...], "pairs": [[i, j], ...]}
        -> {"vectors": [[[...] per token] per text], "scores": [...]}
                                               transformers' BertModel, then the checkpoint's ``linear``
                                               projection, each token's vector L2-normalised, every token
                                               kept ([CLS] and [SEP] too); score of (i, j) = MaxSim: the sum
                                               over text i's tokens of the best dot product with text j's
    <runtime python> e2e/realvllm/oracles.py token-classify MODEL_DIR < {"texts": [...]}
        -> {"probs": [[[...] per token] per text]}   transformers' AutoModelForTokenClassification, softmax
                                               over the labels of each token (special tokens included); one
                                               label: its sigmoid, as vLLM answers it
    <runtime python> e2e/realvllm/oracles.py dual-encoder MODEL_DIR < {"texts": [...], "image_seeds": [...]}
        -> {"images": [base64 PNG, ...], "image_vectors": [...], "text_vectors": [...]}
                                               transformers' CLIPModel: each seed's 40x40 noise image (PNG, made
                                               here so the test sends vLLM the same bytes) through
                                               get_image_features, each text through get_text_features, each
                                               vector L2-normalised
    <runtime python> e2e/realvllm/oracles.py batch - < {"jobs": [{"command", "model_dir", "request"}, ...]}
        -> {"results": [...]}                  several of the above in one interpreter (one import of torch)

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


def hidden_states(model_dir: str, req: dict) -> dict:
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.eval()
    n = model.config.num_hidden_layers
    captured: dict = {}
    model.model.norm.register_forward_hook(lambda mod, args, out: captured.__setitem__("pre_norm", args[0]))
    layers = req["layers"]
    worst = {str(k): 1.0 for k in layers}
    after_norm = 1.0
    tokens, dtypes, shapes = [], [], []
    for path in req["files"]:
        with safe_open(path, "pt") as f:
            ids = f.get_tensor("token_ids")
            hs = f.get_tensor("hidden_states")
        tokens.append([int(x) for x in ids])
        dtypes.append(str(hs.dtype).removeprefix("torch."))
        shapes.append(list(hs.shape))
        with torch.no_grad():
            out = model(input_ids=ids.unsqueeze(0), output_hidden_states=True)
        for slot, k in enumerate(layers):
            ref = captured["pre_norm"][0] if k == n else out.hidden_states[k][0]
            cos = torch.nn.functional.cosine_similarity(hs[:, slot].to(torch.float64), ref.to(torch.float64), dim=-1)
            worst[str(k)] = min(worst[str(k)], float(cos.min()))
            if k == n:
                post = torch.nn.functional.cosine_similarity(hs[:, slot].double(), out.hidden_states[n][0].double(), dim=-1)
                after_norm = min(after_norm, float(post.min()))
    return {"layers": worst, "last_after_norm": after_norm, "tokens": tokens, "dtypes": dtypes, "shapes": shapes,
            "num_hidden_layers": n, "hidden_size": model.config.hidden_size}


def cross_encoder(model_dir: str, req: dict) -> dict:
    from sentence_transformers import CrossEncoder

    m = CrossEncoder(model_dir, device="cpu")
    scores = m.predict([tuple(p) for p in req["pairs"]], convert_to_numpy=True)
    return {"scores": [float(x) for x in scores]}


def late_interaction(model_dir: str, req: dict) -> dict:
    import torch
    from safetensors import safe_open
    from transformers import AutoTokenizer, BertModel

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = BertModel.from_pretrained(model_dir, add_pooling_layer=False, torch_dtype=torch.float32).eval()
    with safe_open(f"{model_dir}/model.safetensors", "pt") as f:
        linear = f.get_tensor("linear.weight").to(torch.float32)
    vectors = []
    for text in req["texts"]:
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            h = model(**enc).last_hidden_state[0]
        vectors.append(torch.nn.functional.normalize(h @ linear.T, dim=-1))
    scores = [float((vectors[i] @ vectors[j].T).max(dim=1).values.sum()) for i, j in req.get("pairs", [])]
    return {"vectors": [v.tolist() for v in vectors], "scores": scores}


def token_classify(model_dir: str, req: dict) -> dict:
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForTokenClassification.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    probs = []
    for text in req["texts"]:
        with torch.no_grad():
            logits = model(**tok(text, return_tensors="pt")).logits[0]
        logits = logits.to(torch.float64)  # one label: its sigmoid, as vLLM's PoolerClassify (activations.py:138-141)
        probs.append((torch.sigmoid(logits) if logits.shape[-1] == 1 else torch.softmax(logits, dim=-1)).tolist())
    return {"probs": probs}


def dual_encoder(model_dir: str, req: dict) -> dict:
    import base64
    import io

    import numpy as np
    import torch
    from PIL import Image
    from transformers import CLIPModel, CLIPProcessor

    model = CLIPModel.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    proc = CLIPProcessor.from_pretrained(model_dir)
    images, pngs = [], []
    for seed in req.get("image_seeds", []):
        image = Image.fromarray((np.random.RandomState(seed).rand(40, 40, 3) * 255).astype("uint8"))
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        images.append(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
        pngs.append(base64.b64encode(buf.getvalue()).decode())

    def unit(features: object) -> list:
        t = getattr(features, "pooler_output", features)
        return torch.nn.functional.normalize(t.to(torch.float64), dim=-1).tolist()

    with torch.no_grad():
        image_vectors = unit(model.get_image_features(**proc(images=images, return_tensors="pt"))) if images else []
        texts = req.get("texts", [])
        text_vectors = unit(model.get_text_features(**proc(text=texts, return_tensors="pt", padding=True))) if texts else []
    return {"images": pngs, "image_vectors": image_vectors, "text_vectors": text_vectors}


COMMANDS = {
    "embed": embed,
    "label-probs": label_probs,
    "hidden-states": hidden_states,
    "cross-encoder": cross_encoder,
    "late-interaction": late_interaction,
    "token-classify": token_classify,
    "dual-encoder": dual_encoder,
}


def main() -> int:
    cmd, model_dir = sys.argv[1], sys.argv[2]
    req = json.load(sys.stdin)
    if cmd == "batch":
        out = {"results": [COMMANDS[j["command"]](j["model_dir"], j["request"]) for j in req["jobs"]]}
    else:
        out = COMMANDS[cmd](model_dir, req)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
