"""``--runtime``: the table of the vLLM installed in this interpreter (the CPU 0.32 runtime of
e2e/realvllm/runtime.py). vLLM, torch and transformers are imported only inside the functions, so that the
other modes import this package with the standard library alone."""

from __future__ import annotations

import ast
import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from .classes import Cls
from .common import PROG, say, write_json
from .reader import Reader
from .remote_code import remote_code_table
from .sdist import sdist_transformers_pin
from .source_mode import static_entry
from .table import Table, default_runner
from .transformers_mode import transformers_table
from .values import ClassV, ExternalV, FuncV, Inst, ModuleV, Thunk, V


class Runtime:
    """The real parts: vLLM imported in this process."""

    def __init__(self, reader: Reader):
        import torch
        import transformers
        from torch import nn
        from vllm.config import PoolerConfig

        self.r, self.torch, self.nn, self.PoolerConfig = reader, torch, nn, PoolerConfig
        self.tmp = tempfile.mkdtemp(prefix="registry-table-")  # an empty "model folder": no ST files, no hub
        hf = transformers.PretrainedConfig(hidden_size=8, vocab_size=16, num_attention_heads=2, bos_token_id=0,
                                           eos_token_id=2, cls_token_id=1, sep_token_id=2)  # fmt: skip
        self.hf = hf
        self.defaults: dict[str, Any] = {
            "hidden_size": 8, "head_dtype": torch.float32, "bos_token_id": 0, "eos_token_id": 2,
            "config": hf, "quant_config": None, "vocab_size": 16,
        }  # fmt: skip
        defaults = self.defaults

        class Stub(nn.Module):
            """Stands in for the parts of a model a pooler factory is handed (a classifier, a projector)."""

            def __getattr__(self, name: str) -> Any:
                try:
                    return super().__getattr__(name)
                except AttributeError:
                    if name.startswith("_"):
                        raise
                    return defaults[name] if name in defaults else Stub()

            def forward(self, *args: Any, **kwargs: Any) -> Any:
                return args[0] if args else None

        self.Stub = Stub
        self._vc: Any = None

    def stubs(self, pooler_config: Any) -> tuple[Any, Any]:
        """A default VllmConfig whose model_config is a stand-in: an empty model folder (no sentence-transformers
        projector, no hub), float32 heads, and the pooler config."""
        from types import SimpleNamespace

        from vllm.config import VllmConfig

        if self._vc is None:
            self._vc = VllmConfig()
        mc = SimpleNamespace(pooler_config=pooler_config, head_dtype=self.torch.float32, model=self.tmp,
                             revision=None, hf_config=self.hf, hf_text_config=self.hf, get_hidden_size=lambda: 8,
                             quantization=None, dtype=self.torch.float32)  # fmt: skip
        object.__setattr__(self._vc, "model_config", mc)
        return mc, self._vc

    def probe(self, real: type) -> Any:
        nn, defaults, Stub = self.nn, self.defaults, self.Stub

        def fallback(self: Any, name: str) -> Any:
            try:
                if isinstance(self, nn.Module):
                    return nn.Module.__getattr__(self, name)
                raise AttributeError(name)
            except AttributeError:
                if name.startswith("_"):
                    raise
                return defaults[name] if name in defaults else Stub()

        probe_cls = type(f"Probe_{real.__name__}", (real,), {"__getattr__": fallback, "__module__": real.__module__})
        obj = object.__new__(probe_cls)
        if isinstance(obj, nn.Module):
            nn.Module.__init__(obj)
        return obj

    def build(self, site: Thunk, me: Inst, real: type, info: Any) -> tuple[list[str], str]:
        """Build the factory's pooler for real; returns (tasks, how)."""
        from vllm.config import set_current_vllm_config

        pc = self.PoolerConfig(seq_pooling_type=info.default_seq_pooling_type,
                               tok_pooling_type=info.default_tok_pooling_type)  # fmt: skip
        _, vc = self.stubs(pc)
        probe = self.probe(real)
        given = {"pooler_config": pc, "vllm_config": vc, "prefix": ""}
        try:
            with set_current_vllm_config(vc):
                pooler = self.real_eval(site, me, probe, given, 0)
            return self.r.order(pooler.get_supported_tasks()), "built"
        except Exception as e:
            err = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}".strip()
        # A pooler class the factory constructs with the model's own parts: instantiate it without __init__.
        cls = self.real_callee(site, me, probe, given)
        if isinstance(cls, type) and hasattr(cls, "get_supported_tasks"):
            try:
                obj = object.__new__(cls)
                self.nn.Module.__init__(obj)
                return self.r.order(obj.get_supported_tasks()), f"{cls.__name__} instantiated without __init__ ({err})"
            except Exception as e2:
                err = f"{err}; bare {cls.__name__}: {type(e2).__name__}"
        raise BuildFailed(err)

    def real_callee(self, site: Thunk, me: Inst, probe: Any, given: dict[str, Any]) -> Any:
        if not isinstance(site.expr, ast.Call) or site.scope is None:
            return None
        try:
            return self.real_eval(Thunk(site.expr.func, site.scope), me, probe, given, 0)
        except Exception:
            return None

    def real_eval(self, t: Thunk, me: Inst, probe: Any, given: dict[str, Any], depth: int) -> Any:
        assert t.expr is not None and t.scope is not None and depth < 20
        scope = t.scope
        glb = sys.modules[scope.mod.name].__dict__
        loc: dict[str, Any] = {}
        for n in {x.id for x in ast.walk(t.expr) if isinstance(x, ast.Name)}:
            if n in given:
                loc[n] = given[n]
                continue
            inner = scope.find(n)
            if inner is None:
                continue  # a module global
            v = inner.value() if inner.expr is None else None
            if v is me or (inner.expr is not None and inner.value() is me):
                loc[n] = probe
            elif inner.expr is not None:
                loc[n] = self.real_eval(inner, me, probe, given, depth + 1)
            elif isinstance(v, (ClassV, FuncV, ModuleV)):
                loc[n] = self.real_object(v)
            elif isinstance(v, ExternalV):
                loc[n] = real_import(v.dotted)
        return eval(compile(ast.Expression(t.expr), str(scope.mod.path), "eval"), glb, loc)

    def real_object(self, v: V) -> Any:
        if isinstance(v, ModuleV):
            return importlib.import_module(v.mod.name)
        if isinstance(v, ClassV):
            c = v.cls
            obj: Any = importlib.import_module(c.mod.name)
            for part in c.qualname.split("."):
                obj = getattr(obj, part)
            return obj
        if isinstance(v, FuncV):
            return getattr(importlib.import_module(v.fn.mod.name), v.fn.node.name)
        raise LookupError(v)


class BuildFailed(Exception):
    pass


def real_import(dotted: str) -> Any:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(dotted)


def runtime_entry(table: Table, reader: Reader, rt: Runtime, arch: str, reg: dict[str, Any], real: type,
                  mismatches: list[str]) -> dict[str, Any]:  # fmt: skip
    from vllm.model_executor.models import registry as vreg
    from vllm.model_executor.models.adapters import as_embedding_model, as_seq_cls_model
    from vllm.model_executor.models.interfaces import supports_lora

    info = vreg._ModelInfo.from_model_cls(real)
    facts = {"generate": info.is_text_generation_model, "pooling": info.is_pooling_model, "attn": info.attn_type,
             "seq_pooling": info.default_seq_pooling_type, "tok_pooling": info.default_tok_pooling_type,
             "score": info.score_type, "lora": bool(supports_lora(real)), "pp": info.supports_pp,
             "mm": info.supports_multimodal}  # fmt: skip
    static = reader.class_for_real(real)
    if isinstance(static, Cls):  # the source reading of the interfaces (what --source gives 0.33) checked here
        read_facts = reader.facts(static)
        mismatches += [f"{arch}: {k} {facts[k]} at runtime, {read_facts[k]} read from source" for k in ("lora", "pp", "mm")
                       if read_facts[k] != facts[k]]  # fmt: skip
    runner, convert = default_runner(facts, arch, table.suffixes)
    pooler: tuple[list[str] | None, str | None] = (None, None)
    read = "runtime"
    if runner == "pooling":
        target = real if facts["pooling"] else (as_embedding_model if convert == "embed" else as_seq_cls_model)(real)
        tcls = reader.class_for_real(target)
        site = reader.pooler_site(tcls) if isinstance(tcls, Cls) else None
        if site is None:
            read = "runtime; no pooler assignment found"
        else:
            where = reader.where(site[0])
            static = reader.static_tasks(site[0])
            try:
                tasks, how = rt.build(site[0], site[1], target, info)
                if how != "built":
                    read = f"runtime; pooler {how}"
            except BuildFailed as e:
                tasks, read = static, f"runtime; pooler read from source: the factory could not be built ({e})"  # type: ignore[assignment]
            if static != tasks:
                mismatches.append(f"{arch}: built {tasks}, source reading {static}")
            pooler = (tasks, where)
    return table.entry(arch, reg, facts, pooler, read)


def build_runtime(sdist: Path | None, tf_out: Path | None) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    say("importing vllm")
    import transformers
    import vllm
    from vllm.config import model as config_model
    from vllm.model_executor.models import registry as vreg
    from vllm.model_executor.models.adapters import as_embedding_model, as_seq_cls_model

    logging.getLogger("vllm").setLevel(logging.ERROR)
    transformers.logging.set_verbosity_error()
    pkg = Path(vllm.__file__).parent
    reader = Reader(pkg, sdist)
    rt = Runtime(reader)
    version = vllm.__version__.split("+")[0]
    pin = sdist_transformers_pin(sdist)
    if pin and pin != transformers.__version__:
        say(f"WARNING: vLLM {version} tests with transformers {pin}; this interpreter has {transformers.__version__}")
    say(f"vLLM {vllm.__version__} at {pkg}; transformers {transformers.__version__}")

    registry = reader.registry()
    real_models = vreg.ModelRegistry.models
    static_pairs = {a: (reader.module_name(e["module"]), e["cls"]) for a, e in registry.items()}
    real_pairs = {a: (m.module_name, m.class_name) for a, m in real_models.items()}
    if static_pairs != real_pairs:
        diff = sorted(set(static_pairs.items()) ^ set(real_pairs.items()))
        raise SystemExit(f"the registry read from source differs from vLLM's ModelRegistry: {diff[:10]}")
    suffixes = [(s, r, c) for s, (r, c) in config_model._SUFFIX_TO_DEFAULTS]
    if suffixes != reader.suffix_defaults():
        raise SystemExit("config/model.py _SUFFIX_TO_DEFAULTS read from source differs from vLLM's")
    from vllm.tasks import POOLING_TASKS

    if tuple(POOLING_TASKS) != reader.tasks_order:
        raise SystemExit("vllm/tasks.py POOLING_TASKS read from source differs from vLLM's")

    table = Table(reader, ".".join(version.split(".")[:2]), transformers.__version__,
                  f"vLLM {vllm.__version__} imported by {PROG} --runtime (ModelRegistry, "
                  "_ModelInfo.from_model_cls in-process, poolers built with a default PoolerConfig)")  # fmt: skip
    modules = sorted({e.module_name for e in real_models.values()})
    failed: dict[str, str] = {}
    for n, name in enumerate(modules, 1):
        try:
            importlib.import_module(name)
        except Exception as e:
            failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
        if n % 50 == 0 or n == len(modules):
            say(f"imported {n}/{len(modules)} model modules ({len(failed)} do not import on CPU)")

    archs: dict[str, Any] = {}
    mismatches: list[str] = []
    for n, (arch, reg) in enumerate(sorted(registry.items()), 1):
        if n % 100 == 0:
            say(f"{n}/{len(registry)} architectures")
        modname = reader.module_name(reg["module"])
        if modname in failed:
            archs[arch] = static_entry(table, reader, arch, reg, f"source: the module does not import on CPU ({failed[modname]})")
            continue
        try:
            real = getattr(sys.modules[modname], reg["cls"])  # a lazy package imports here
        except Exception as e:
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
            archs[arch] = static_entry(table, reader, arch, reg, f"source: the class does not import on CPU ({why})")
            continue
        cuda = reader.static_class(reg["module"], reg["cls"])
        if cuda is not None and (cuda.mod.name, cuda.qualname) != (real.__module__, real.__qualname__):
            archs[arch] = static_entry(table, reader, arch, reg, f"source: on CPU vLLM maps this name to "
                                       f"{real.__module__}.{real.__qualname__}, on CUDA to {cuda.mod.name}."
                                       f"{cuda.qualname}, which is read from source")  # fmt: skip
            continue
        try:
            archs[arch] = runtime_entry(table, reader, rt, arch, reg, real, mismatches)
        except Exception as e:  # not expected: say so, and read the class from source
            say(f"WARNING {arch}: runtime inspection failed: {type(e).__name__}: {e}")
            archs[arch] = static_entry(table, reader, arch, reg, f"source: runtime inspection failed ({type(e).__name__})")
    for m in mismatches:
        say(f"NOTE runtime and source reading differ: {m}")

    in_tf = lambda name: hasattr(transformers, name)  # noqa: E731
    remote = remote_code_table(reader, archs, registry, in_tf, transformers.__version__)
    convert = {}
    base = vreg.ModelRegistry.models["LlamaForCausalLM"].load_model_cls()
    info = vreg._ModelInfo.from_model_cls(base)
    for conv, fn in (("embed", as_embedding_model), ("classify", as_seq_cls_model)):
        target = fn(base)
        tcls = reader.class_for_real(target)
        assert isinstance(tcls, Cls)
        site = reader.pooler_site(tcls)
        assert site is not None
        tasks, _ = rt.build(site[0], site[1], target, info)
        convert[conv] = {"tasks": tasks, "pooler": reader.where(site[0])}
    doc = table.document(archs, remote, convert)
    if tf_out is not None:
        write_json(tf_out, transformers_table())
    shutil.rmtree(rt.tmp, ignore_errors=True)
    return doc
