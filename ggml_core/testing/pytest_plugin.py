"""pytest plugin shipped by ggml-core (registered through the ``pytest11`` entry point)."""
