"""Building llama-server: where the source comes from, the toolchain, CMake and ninja, build-info.json."""
