"""What the planner knows about hardware and models: the GPU catalog, architectures and parameter counts, model
presets and the Hugging Face config.json reader."""
