"""Tiny Qwen2.5-VL / Qwen3-VL policies built from config, with a locally trained tokenizer."""
