"""Collecting experience: episode runners, vector-env runners, replay buffers, LLM generation."""
