"""llama.cpp: installs (nightly or source), the binary's dialect, and argument rendering."""
