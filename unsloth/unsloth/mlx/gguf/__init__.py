# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""GGUF export: conversion, tokenizer keys, file types, quantization and reload, without llama.cpp's tools."""
