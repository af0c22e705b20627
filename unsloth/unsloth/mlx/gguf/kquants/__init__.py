"""llama.cpp's K-quant types and mixes, written in numpy with no llama.cpp: blocks, type choice, the file writer."""
