"""Which models the verifier can serve exactly, decided from the config alone (no weights).

Exact speculative decoding scores a round's token tree in one pass over a session's cache, then
keeps the accepted path and drops the rest. That needs three things of the model:

- a decoder-only model: one token sequence, each token reading only those before it (not an
  encoder-decoder);
- a causal LM head: a class that transformers' AutoModelForCausalLM builds for the config;
- per-layer state that can be rolled back to any accepted prefix and masked per tree node: an
  attention KV cache, one entry per token, of a kind the verifier's tree mask implements. A
  recurrent state (Mamba, RWKV, linear attention, short convolutions, the hybrids built from
  them) folds every token into one running value; dropping rejected tokens would mean keeping a
  copy per tree node. transformers marks such classes `_is_stateful` (its own assisted
  generation refuses them for the same reason) and names each layer's kind in `layer_types`.
"""

from __future__ import annotations

from transformers import PretrainedConfig
from transformers.configuration_utils import ALLOWED_MLP_LAYER_TYPES, remap_legacy_layer_types
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

# Layer kinds whose keys and values the verifier's KV cache keeps per token and its tree mask
# covers: full causal attention, and causal attention over a sliding window.
SERVED_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})


def causal_lm_class(config: PretrainedConfig) -> type | None:
    """The class AutoModelForCausalLM builds for this config (None: it builds none)."""
    try:
        return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except KeyError:
        return None


def model_class_name(config: PretrainedConfig) -> str:
    """The class the checkpoint names (config.architectures), else the causal LM class, else the config's."""
    if config.architectures:
        return config.architectures[0]
    model_class = causal_lm_class(config)
    return model_class.__name__ if model_class is not None else type(config).__name__


def servable(config: PretrainedConfig) -> str | None:
    """Why the verifier cannot serve this model exactly (one line), or None if it can."""
    if getattr(config, "is_encoder_decoder", False):
        return "an encoder-decoder model; the verifier serves causal decoder-only models (one token sequence, one KV cache)"
    model_class = causal_lm_class(config)
    if model_class is None:
        return f"no causal LM head: transformers' AutoModelForCausalLM builds no class for model_type {config.model_type!r}"
    if getattr(model_class, "_is_stateful", False):
        return (
            f"{model_class.__name__} keeps a recurrent state that cannot be rolled back to an accepted prefix "
            "(transformers marks it stateful); the verifier needs an attention KV cache in every layer"
        )
    layer_types = getattr(config.get_text_config(decoder=True), "layer_types", None) or []
    unserved = sorted(set(remap_legacy_layer_types(list(layer_types))) - SERVED_LAYER_TYPES - set(ALLOWED_MLP_LAYER_TYPES))
    if unserved:
        return (
            f"layers of type {', '.join(unserved)}; the verifier's KV cache and tree mask serve "
            f"{' and '.join(sorted(SERVED_LAYER_TYPES))} layers only"
        )
    return None
