"""Test kits: fake hosts, real tokenizers, rows, pool and memory spies, tiny MLX text and vision models, a notebook Hub cache and a stand-in Hub; no command-line tools."""
