"""Varied prompts for the integration tests: chat, code, summarization, question answering."""

CHAT_PROMPTS: list[str] = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about autumn leaves.",
    "Explain what a hash table is to a ten-year-old.",
    "Fix the bug in this function and return the corrected code:\n\ndef add(a, b):\n    return a - b",
    "Translate to French: The weather is nice today and I would like to go for a walk.",
    "Summarize in one sentence: The committee met on Monday. The committee approved the budget. "
    "The committee will meet again on Monday next week to approve the budget for the school.",
    "Passage: Marie Curie was a physicist and chemist who conducted pioneering research on radioactivity. "
    "She was the first woman to win a Nobel Prize.\nQuestion: What did Marie Curie research?",
    "List three prime numbers greater than 10.",
]
TEXT_PROMPTS: list[str] = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "Once upon a time, in a small village by the sea,",
]
