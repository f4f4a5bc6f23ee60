"""Which LoRA weights vLLM's Qwen3-VL applies, read from the vllm wheel's source (stdlib only, never imported).

vLLM needs CUDA to import, so the facts that decide what happens to an adapter's tensors are read from the
unpacked wheel with ``ast`` (the directory that ``tests/cluster_wheels.py`` gives for ``vllm``):

- vllm/model_executor/models/qwen3_vl.py, class ``Qwen3VLForConditionalGeneration``: ``packed_modules_mapping``
  (``q_proj``/``k_proj``/``v_proj`` load into ``qkv_proj``, ...), ``hf_to_vllm_mapper``'s prefix renames
  (``model.language_model.`` -> ``language_model.model.``, ``model.visual.`` -> ``visual.``) and
  ``get_mm_mapping`` (the ``language_model``, ``connector`` and ``tower_model`` prefixes);
- vllm/model_executor/models/qwen3.py ``Qwen3Attention`` and qwen2.py ``Qwen2MLP`` (Qwen3's MLP): the text
  model's linear layers, i.e. the module names its LoRA loader expects;
- vllm/lora/model_manager.py ``_maybe_init_mm``: without ``enable_tower_connector_lora`` only the language
  model gets a LoRA wrapper, so a tower or connector LoRA weight loads but is never applied.

``parse_fine_tuned_lora_name`` (vllm/lora/utils.py) turns an adapter key into a vLLM module name; :func:`module_name`
follows it for the prefix renames this model has.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

MODELS = Path("vllm/model_executor/models")
PEFT_PREFIX = "base_model.model."
LORA_SUFFIXES = (".lora_A.weight", ".lora_B.weight")


@dataclass(frozen=True)
class Qwen3VLLoraRules:
    """vLLM's LoRA facts for Qwen3-VL (see the module docstring for where each comes from)."""

    packed_modules: dict[str, list[str]]
    prefix_renames: dict[str, str]
    language_model: str
    connector: tuple[str, ...]
    tower_model: tuple[str, ...]
    text_linear_modules: frozenset[str]
    tower_lora_needs_flag: bool

    @property
    def expected_text_modules(self) -> frozenset[str]:
        """Adapter module names the language model's loader takes: packed layers by their parts."""
        names: set[str] = set()
        for layer in self.text_linear_modules:
            names.update(self.packed_modules.get(layer, [layer]))
        return frozenset(names)


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise LookupError(f"class {name} not found")


def _class_attribute(cls: ast.ClassDef, name: str) -> ast.expr:
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node.value
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    raise LookupError(f"{cls.name}.{name} not found")


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise LookupError(f"{cls.name}.{name}() not found")


def _keywords(call: ast.expr) -> dict[str, object]:
    assert isinstance(call, ast.Call), ast.unparse(call)
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}


def _linear_layers(cls: ast.ClassDef) -> set[str]:
    """``self.<name> = <Something>Linear(...)`` assignments in ``cls``."""
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            for target in node.targets:
                if isinstance(target, ast.Attribute) and called.endswith("Linear"):
                    names.add(target.attr)
    return names


def _tower_lora_needs_flag(manager: ast.Module) -> bool:
    """``_maybe_init_mm`` returns early, LoRA for the tower off, unless ``enable_tower_connector_lora``."""
    method = _method(_class(manager, "LoRAModelManager"), "_maybe_init_mm")
    for node in ast.walk(method):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "not self.lora_config.enable_tower_connector_lora":
            body = [ast.unparse(statement) for statement in node.body]
            return "self.supports_tower_connector_lora = False" in body and body[-1] == "return"
    return False


def read_rules(vllm_root: Path) -> Qwen3VLLoraRules:
    """Read the rules from an unpacked vllm wheel at ``vllm_root``."""
    qwen3_vl = ast.parse((vllm_root / MODELS / "qwen3_vl.py").read_text())
    model = _class(qwen3_vl, "Qwen3VLForConditionalGeneration")
    mm_mapping = next(n for n in ast.walk(_method(model, "get_mm_mapping")) if isinstance(n, ast.Return))
    mapping = _keywords(mm_mapping.value)
    text_layers = _linear_layers(_class(ast.parse((vllm_root / MODELS / "qwen3.py").read_text()), "Qwen3Attention"))
    text_layers |= _linear_layers(_class(ast.parse((vllm_root / MODELS / "qwen2.py").read_text()), "Qwen2MLP"))
    manager = ast.parse((vllm_root / "vllm/lora/model_manager.py").read_text())

    def as_tuple(value: object) -> tuple[str, ...]:
        return tuple(value) if isinstance(value, list) else (str(value),)

    return Qwen3VLLoraRules(
        packed_modules=ast.literal_eval(_class_attribute(model, "packed_modules_mapping")),
        prefix_renames=_keywords(_class_attribute(model, "hf_to_vllm_mapper"))["orig_to_new_prefix"],
        language_model=str(mapping["language_model"]),
        connector=as_tuple(mapping["connector"]),
        tower_model=as_tuple(mapping["tower_model"]),
        text_linear_modules=frozenset(text_layers),
        tower_lora_needs_flag=_tower_lora_needs_flag(manager),
    )


def module_name(key: str, rules: Qwen3VLLoraRules) -> str:
    """The vLLM module an adapter tensor ``key`` loads into (``parse_fine_tuned_lora_name`` with the renames)."""
    if not key.endswith(LORA_SUFFIXES):
        raise ValueError(f"{key} is unsupported LoRA weight")
    name = key.removeprefix(PEFT_PREFIX)
    for prefix, new in rules.prefix_renames.items():  # WeightsMapper._map_name: every matching prefix, in order
        if name.startswith(prefix):
            name = name.replace(prefix, new, 1)
    return name.rsplit(".", 2)[0]


def problems(keys: list[str], rules: Qwen3VLLoraRules) -> list[str]:
    """Why vLLM would refuse, or load and never apply, each adapter tensor (empty: all applied)."""
    found = []
    for key in keys:
        try:
            name = module_name(key, rules)
        except ValueError as error:
            found.append(str(error))
            continue
        leaf = name.rsplit(".", 1)[-1]
        prefixes = [p for p in (rules.language_model, *rules.connector, *rules.tower_model) if name.startswith(p)]
        longest = max(prefixes, key=len, default=None)  # LoRAModelManager._get_punica_wrapper: longest prefix
        if longest != rules.language_model:
            found.append(
                f"{key}: vLLM module {name} is outside the language model; without "
                "enable_tower_connector_lora it gets no LoRA wrapper, so the weight is never applied"
            )
        elif leaf not in rules.expected_text_modules:
            found.append(f"{key}: vLLM expects target modules in {sorted(rules.expected_text_modules)}, got {leaf}")
    return found
