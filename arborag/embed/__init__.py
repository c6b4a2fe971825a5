"""The sentence embedders (local model, light local model, OpenAI-compatible server), their text windows and the embedding worker process."""
