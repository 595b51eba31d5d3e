"""Tiny generated GGUF models for the synthetic tier: recipes, architectures, tokenizer and weights."""
