"""A batched pass's attention over each session's own cache, where it lies.

The linear layers of a batched pass run over all sessions' new tokens at once, packed in one
sequence of rows (batched_pass.py: session b's T_b rows from row o_b); its attention runs once per
session, over that session's KV cache buffers as they are. SessionCache is the cache the
model's forward is given: its `update` writes session b's new entries (its rows) in place into
its own GrowableLayer (kv_cache.py), and returns keys and values of a nominal shape (stride 0:
nothing allocated) that nothing reads. The attention function `SESSION_ATTENTION`, selected for
the pass by `session_attention`, calls per session b the attention function the model was
loaded with (GROUPED_SDPA, sdpa or eager: attention.py), on b's query rows, b's cache view
[1, kv_heads, L_b + T_b, head_dim] and b's mask rows and columns. Every argument the model
passes (scaling, soft cap, window, sinks) reaches that function unchanged, so each session's
attention is what its lone pass computes, for any architecture whose attention modules call
`cache.update` and then the configured attention function (every model class of transformers
5.x). Padding query rows get zeros: no real row reads them.

The pass selects SESSION_ATTENTION by setting `_attn_implementation` on every config its
modules read, and restores each on exit: passes run on one thread (as the CUDA backend's
process-wide flags already require).
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from transformers import AttentionInterface, DynamicCache, PretrainedConfig, PreTrainedModel
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from verifier_svc.kv_cache import KVCache

SESSION_ATTENTION = "specdec_session_attention"


@dataclass(frozen=True)
class SessionRows:
    """Where one session sits in a batched pass: its cache and its T_b new tokens, the pass's
    query rows [first, first + T_b)."""

    cache: KVCache
    new: int
    first: int

    @property
    def rows(self) -> slice:
        return slice(self.first, self.first + self.new)


class _SessionsLayer(DynamicLayer):
    """One layer of SessionCache: writes each session's real new entries into its own cache."""

    def __init__(self, sessions: Sequence[SessionRows], index: int, cached: int) -> None:
        super().__init__()
        self.sessions, self.index, self.cached = sessions, index, cached

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        new = key_states.shape[-2]  # [1, kv_heads, R', head_dim]
        for rows in self.sessions:
            rows.cache.cache.layers[self.index].update(key_states[:, :, rows.rows], value_states[:, :, rows.rows])
        shape = (*key_states.shape[:2], self.cached + new, key_states.shape[-1])
        return key_states.new_zeros(()).expand(shape), value_states.new_zeros(()).expand(shape)

    def get_seq_length(self) -> int:
        return self.cached


class SessionCache(DynamicCache):
    """The cache of a batched pass: L = `cached` (the longest session's) entries in name, each
    session's own entries in fact (see the module docstring)."""

    def __init__(self, config: PretrainedConfig, sessions: Sequence[SessionRows], cached: int) -> None:
        super().__init__(config=config)
        self.layers = [_SessionsLayer(sessions, index, cached) for index in range(len(self.layers))]


@dataclass(frozen=True)
class _ActivePass:
    sessions: Sequence[SessionRows]
    implementations: dict[int, str | None]  # id(config) -> the attention it was loaded with


_active: ContextVar[_ActivePass | None] = ContextVar("specdec_session_pass", default=None)


# Per model, the configs its modules read: found once, not by walking every module each pass.
_MODEL_CONFIGS: weakref.WeakKeyDictionary[PreTrainedModel, dict[int, PretrainedConfig]] = weakref.WeakKeyDictionary()


def _configs(model: PreTrainedModel) -> dict[int, PretrainedConfig]:
    found = _MODEL_CONFIGS.get(model)
    if found is None:
        found = {id(model.config): model.config}
        for module in model.modules():
            config = getattr(module, "config", None)
            if isinstance(config, PretrainedConfig):
                found[id(config)] = config
        _MODEL_CONFIGS[model] = found
    return found


@contextlib.contextmanager
def session_attention(model: PreTrainedModel, sessions: Sequence[SessionRows]) -> Iterator[None]:
    """The context of a batched pass over `sessions` (in batch order): the model's attention
    modules run SESSION_ATTENTION, which reads each session's cache in place."""
    configs = _configs(model)
    implementations = {key: config._attn_implementation_internal for key, config in configs.items()}
    token = _active.set(_ActivePass(sessions, implementations))
    try:
        for config in configs.values():
            config._attn_implementation_internal = SESSION_ATTENTION
        yield
    finally:
        for key, config in configs.items():
            config._attn_implementation_internal = implementations[key]
        _active.reset(token)


def _loaded_attention(module: torch.nn.Module, active: _ActivePass) -> Callable[..., tuple[torch.Tensor, object]]:
    """The attention function `module` calls outside a batched pass: the registered one its
    config names, else (eager) its own modeling file's `eager_attention_forward`."""
    loaded = active.implementations.get(id(getattr(module, "config", None)))
    if loaded and loaded != "eager":
        return ALL_ATTENTION_FUNCTIONS[loaded]
    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is None:
        raise NotImplementedError(f"{type(module).__name__}: eager attention without a module-level eager_attention_forward")
    return eager


def session_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # [1, heads, R', d]
    key: torch.Tensor,  # nominal, unread: the sessions' caches are read instead
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,  # additive, [1, 1, R', W]: each row's own session's keys at [0, L_b + T_b)
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ([B, T, heads, d] output, no weights)."""
    active = _active.get()
    assert active is not None, f"{SESSION_ATTENTION} runs only inside session_attention()"
    inner = _loaded_attention(module, active)
    batch, heads, new, head_dim = query.shape
    out = query.new_zeros(batch, new, heads, head_dim)
    index = module.layer_idx  # type: ignore[attr-defined]
    for rows in active.sessions:
        layer = rows.cache.cache.layers[index]
        mask = None if attention_mask is None else attention_mask[:, :, rows.rows, : layer.keys.shape[-2]]
        result, _ = inner(module, query[:, :, rows.rows], layer.keys, layer.values, mask, **kwargs)
        out[:, rows.rows] = result
    return out, None


AttentionInterface.register(SESSION_ATTENTION, session_attention_forward)
AttentionMaskInterface.register(SESSION_ATTENTION, sdpa_mask)
