"""specdec: exact speculative decoding as two gRPC services (drafter and verifier)."""

from specdec.client import AsyncClient, Chunk, Client, GenerationResult, GenerationStats

__all__ = ["AsyncClient", "Chunk", "Client", "GenerationResult", "GenerationStats"]
