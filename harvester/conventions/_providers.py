"""Where a recorded model call went: the hosts a replay of it may reach (the seal's model hosts).

A model span names its endpoint (GenAI ``server.address``/``server.port``) or only its provider
(``gen_ai.provider.name``, ``gen_ai.system``, OpenInference ``llm.provider``/``llm.system``); a provider
stands for the host its documentation gives. The names are the GenAI semconv's well-known providers
and OpenInference's; patterns are ``fnmatch``-style (a regional Vertex host, any Azure resource).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..model import Run

__all__ = ["EVERY_PROVIDER_HOST", "PROVIDER_HOSTS", "documented_hosts", "model_hosts"]

_OPENAI = ("api.openai.com",)
_ANTHROPIC = ("api.anthropic.com",)
_AZURE = ("*.openai.azure.com", "*.services.ai.azure.com", "*.inference.ai.azure.com", "models.inference.ai.azure.com")
_GEMINI = ("generativelanguage.googleapis.com",)
_VERTEX = ("aiplatform.googleapis.com", "*-aiplatform.googleapis.com")
_MISTRAL = ("api.mistral.ai",)
_COHERE = ("api.cohere.com", "api.cohere.ai")

PROVIDER_HOSTS: dict[str, tuple[str, ...]] = {
    "openai": _OPENAI,
    "anthropic": _ANTHROPIC,
    "azure": _AZURE,
    "azure.ai.openai": _AZURE,
    "azure.ai.inference": _AZURE,
    "az.ai.openai": _AZURE,
    "az.ai.inference": _AZURE,
    "gcp.gemini": _GEMINI,
    "google": _GEMINI + _VERTEX,
    "gemini": _GEMINI,
    "gcp.vertex_ai": _VERTEX,
    "gcp.gen_ai": _GEMINI + _VERTEX,
    "vertex_ai": _VERTEX,
    "vertexai": _VERTEX,
    "aws": ("bedrock-runtime.*.amazonaws.com",),
    "aws.bedrock": ("bedrock-runtime.*.amazonaws.com",),
    "mistral_ai": _MISTRAL,
    "mistralai": _MISTRAL,
    "cohere": _COHERE,
    "groq": ("api.groq.com",),
    "deepseek": ("api.deepseek.com",),
    "perplexity": ("api.perplexity.ai",),
    "x_ai": ("api.x.ai",),
    "xai": ("api.x.ai",),
    "ibm.watsonx.ai": ("*.ml.cloud.ibm.com",),
    "openrouter": ("openrouter.ai",),
    # OpenInference's further providers (``OpenInferenceLLMProviderValues``) and Hugging Face's
    # Inference Providers (smolagents' default model, which names no provider)
    "fireworks": ("api.fireworks.ai",),
    "together": ("api.together.ai", "api.together.xyz"),
    "cerebras": ("api.cerebras.ai",),
    "moonshot": ("api.moonshot.ai", "api.moonshot.cn"),
    "zai": ("api.z.ai", "open.bigmodel.cn"),
    "minimax": ("api.minimax.io", "api.minimaxi.com"),
    "meta": ("api.llama.com",),
    "oracle": ("inference.generativeai.*.oci.oraclecloud.com",),
    "ollama": ("localhost:11434", "127.0.0.1:11434"),  # its server's default address
    "huggingface": ("router.huggingface.co", "api-inference.huggingface.co"),
}

# Every provider's documented host, each once: what a recording that named no model host may reach. Not
# a local server's (Ollama's): a port of this machine is no provider's, and what any such case could reach.
EVERY_PROVIDER_HOST = tuple(
    dict.fromkeys(h for hosts in PROVIDER_HOSTS.values() for h in hosts if not h.startswith(("localhost:", "127.")))
)

# A model name whose provider the spans did not say: the provider its name belongs to.
_MODEL_PREFIXES = (
    (("gpt-", "o1", "o3", "o4", "chatgpt-", "text-embedding-"), "openai"),
    (("claude",), "anthropic"),
    (("gemini",), "gcp.gemini"),
    (("mistral", "codestral", "magistral"), "mistral_ai"),
    (("command",), "cohere"),
)


def documented_hosts(provider: str | None) -> tuple[str, ...]:
    """The documented API hosts of a provider (case-insensitive); none for a provider not listed."""
    return PROVIDER_HOSTS.get(provider.lower(), ()) if provider else ()


def _provider_of_model(model: str | None) -> str | None:
    name = (model or "").lower().rpartition("/")[2]  # "openai/gpt-4.1" as routers spell it
    return next((p for prefixes, p in _MODEL_PREFIXES if name.startswith(prefixes)), None)


def model_hosts(runs: Iterable[Run]) -> list[str]:
    """Every host the runs' model calls reached, in first-seen order: the endpoints their spans name,
    else their providers' documented hosts, else (no provider said) the provider of the model's name."""
    out: dict[str, None] = {}
    for run in runs:
        said = [(c.server, c.provider, c.model or run.model) for c in run.llm_calls] or [(None, None, run.model)]
        for server, provider, model in said:
            if server:
                out[server] = None
            else:
                out.update(dict.fromkeys(documented_hosts(provider or _provider_of_model(model))))
    return list(out)
